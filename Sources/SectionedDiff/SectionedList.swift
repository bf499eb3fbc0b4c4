/// A list of sections, each with a key and the identifiers of its items in order.
///
/// The input and output of the diff: `SectionedList<String, Int>` for sections keyed by name holding
/// object numbers.
public struct SectionedList<SectionKey: Hashable, Item: Hashable>: Equatable {
    /// One section: its key and its items in order.
    public struct Section: Equatable {
        /// The section's identity.
        public var key: SectionKey
        /// The items, in order.
        public var items: [Item]

        /// A section with its key and items.
        @inlinable
        public init(key: SectionKey, items: [Item]) {
            self.key = key
            self.items = items
        }
    }

    /// The sections, in order.
    public var sections: [Section]

    /// Lists made of these sections.
    @inlinable
    public init(_ sections: [Section] = []) {
        self.sections = sections
    }

    /// The number of items in all sections.
    @inlinable
    public var itemCount: Int { sections.reduce(0) { $0 + $1.items.count } }
}

extension SectionedList: Sendable where SectionKey: Sendable, Item: Sendable {}
extension SectionedList.Section: Sendable where SectionKey: Sendable, Item: Sendable {}
