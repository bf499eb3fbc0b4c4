import SectionedDiff

typealias Lists = SectionedList<String, String>

/// `lists("K:k1,k2 L:l1")`: sections keyed K and L.
func lists(_ text: String) -> Lists {
    SectionedList(
        text.split(separator: " ").map { part in
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            let items = pieces.count > 1 ? pieces[1].split(separator: ",").map(String.init) : []
            return .init(key: String(pieces[0]), items: items)
        })
}

func p(_ section: Int, _ item: Int) -> ItemPath { ItemPath(section: section, item: item) }

/// The batch's callbacks as short strings: "del [0,1]", "sdel 0", "sins 2", "ins [0,0]", "move [0,1]->[2,1]",
/// "upd [2,0]->[2,0]".
func describe(_ changes: ChangeSet<String, String>) -> [String] {
    changes.batch.callbacks.map { callback in
        switch callback {
        case .deleteItem(let item, let at): "del \(item) \(at)"
        case .deleteSection(let at): "sdel \(at)"
        case .insertSection(let at): "sins \(at)"
        case .insertItem(let item, let at): "ins \(item) \(at)"
        case .moveItem(let item, let from, let to, _): "move \(item) \(from)->\(to)"
        case .updateItem(let item, let from, let to, _): "upd \(item) \(from)->\(to)"
        }
    }
}
