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
        var marked = Set<ObjectIdentifier>()
        for object in processedUnsaved {
            precondition(object.tracking.contains(.processedUnsaved), "\(object.objectID) is listed unmarked")
            precondition(marked.insert(ObjectIdentifier(object)).inserted, "\(object.objectID) is listed twice")
        }
    }
}
#endif
