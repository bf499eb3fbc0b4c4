// The controller's API speaks in SectionedDiff's types (ItemPath, ChangeSet): re-export them so that
// `import EntityStore` is all an app needs.
@_exported import SectionedDiff
