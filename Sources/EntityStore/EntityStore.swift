// The controller's API speaks in SectionedDiff's types (ItemPath, ChangeSet): re-export them so that
// `import EntityStore` is all an app needs.
@_exported import SectionedDiff

/// The version of the EntityStore library (semantic versioning): `"0.1.0"`.
public let entityStoreVersion = "0.1.0"
