/// The position of an item: its section's index and its row in the section.
///
/// (Named so as not to clash with Foundation's `IndexPath`.)
public struct ItemPath: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The section's index.
    public var section: Int
    /// The item's row within the section.
    public var item: Int

    /// A path to row `item` of section `section`.
    @inlinable
    public init(section: Int, item: Int) {
        self.section = section
        self.item = item
    }

    @inlinable
    public static func < (lhs: ItemPath, rhs: ItemPath) -> Bool {
        lhs.section == rhs.section ? lhs.item < rhs.item : lhs.section < rhs.section
    }

    public var description: String { "[\(section),\(item)]" }
}

/// Why lists cannot be diffed.
public struct SectionedDiffError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong, naming the duplicate.
    public var message: String

    /// Creates an error with its message.
    @inlinable
    public init(message: String) { self.message = message }

    public var description: String { message }
}
