#if DEBUG
extension ObjectContext {
    /// Checks the context's bookkeeping against its objects: the unsaved list and the pending record agree with
    /// the objects' bits, every unsaved object is registered here, every registered object with changes is
    /// unsaved, and the objects with processed changes are marked. Tests call it after their steps.
    func _checkInvariants() {
        dirty._checkInvariants()
        pending._checkInvariants()
        for object in dirty {
            precondition(object.context === self, "\(object.objectID) is unsaved but belongs elsewhere")
            precondition(registered[object.objectID] === object, "\(object.objectID) is unsaved, not registered")
        }
        registered._checkInvariants()
        undo._checkInvariants()
        for object in registered.objects {
            let id = object.objectID
            precondition(object.context === self, "\(id) is registered but belongs elsewhere")
            if object.hasChanges || object.isDeleted {
                precondition(dirty.contains(object), "\(id) has unsaved changes but is not listed")
            }
        }
        // Both sides of every link the context holds loaded agree: an object listed by a live object's relationship
        // lists that object back through the inverse, where the inverse is loaded.
        for object in registered.objects where !object.isDeleted {
            for (name, targets) in object.related {
                guard let relationship = object.entity.relationship(name) else { continue }
                for id in targets {
                    guard let target = registered[id], !target.isDeleted,
                        let back = target.related[relationship.inverse]
                    else { continue }
                    precondition(
                        back.contains(object.objectID),
                        "\(object.objectID).\(name) holds \(id), whose \(relationship.inverse) does not hold it back")
                }
            }
        }
        var marked = Set<ObjectIdentifier>()
        for object in processedUnsaved {
            precondition(object.tracking.contains(.processedUnsaved), "\(object.objectID) is listed unmarked")
            precondition(marked.insert(ObjectIdentifier(object)).inserted, "\(object.objectID) is listed twice")
        }
    }
}
#endif
