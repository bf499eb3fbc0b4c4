import EntityStore
import Foundation

/// Uniqueness clashes: two objects made apart (offline, on two stores) with one value of a unique attribute. The
/// one with the larger global ID (every store decides alike) is merged into the other: its relationships move to
/// the winner, its other values are kept where they are newer than the winner's, and it is removed with nothing
/// linked to it, so its delete rules reach nothing it held. The merge's changes are pushed like a local save.
extension SyncEngine {
    /// Finds objects among `touched` (and the winners of their merges, until no clash is left) that share a unique
    /// value with another object, and merges the loser of each pair into the winner in `context`.
    ///
    /// - Parameters:
    ///   - doomed: Objects the server deleted: in a clash they lose, whatever their global IDs.
    ///   - server: The server's state of objects by global ID (the page's, and more read on demand), for the
    ///     stamps that decide which value of a property is newer.
    ///   - pending: The keys of local changes not pushed yet (newer than anything on the server).
    ///   - seen: The largest stamp this store has seen: merges are stamped after it.
    /// - Returns: What the merges changed, to push.
    func mergeClashes(
        _ touched: [ManagedObject], _ context: ObjectContext, doomed: Set<ObjectID>,
        server: (Set<UUID>) throws -> [UUID: ServerObject], pending: [ObjectID: Set<String>], seen: UInt64,
        _ report: inout SyncReport
    ) throws -> (merges: [SyncState.PendingMerge], tombstones: [SyncState.PendingTombstone]) {
        var removed = Set<ObjectID>()
        var work = touched
        var merges: [SyncState.PendingMerge] = []
        var tombstones: [SyncState.PendingTombstone] = []
        let stamp = HybridLogicalClock.stamp(after: seen, at: Date())
        while let object = work.popLast() {
            guard !object.isDeleted, !removed.contains(object.objectID),
                let entity = plan.entities[object.entity.name]
            else { continue }
            for attribute in entity.uniqueAttributes {
                guard !removed.contains(object.objectID) else { break }
                let value = try object.value(forKey: attribute.name)
                guard !value.isNull else { continue }
                let request = FetchRequest(
                    entity: plan.uniquenessScope(of: attribute.name, in: entity.name),
                    predicate: .comparison(
                        .init(
                            keyPath: [attribute.name], op: .equal, operand: .value(value),
                            options: attribute.isCaseInsensitive ? .caseDiacriticInsensitive : [])))
                for other in try context.fetch(request)
                where other.objectID != object.objectID && !removed.contains(other.objectID) && !other.isDeleted {
                    let (mine, theirs) = (try globalID(of: object), try globalID(of: other))
                    let (objectDoomed, otherDoomed) = (
                        doomed.contains(object.objectID), doomed.contains(other.objectID)
                    )
                    guard !(objectDoomed && otherDoomed) else { continue }
                    let mineWins = objectDoomed != otherDoomed ? otherDoomed : mine.uuidString < theirs.uuidString
                    let (winner, loser) = mineWins ? (object, other) : (other, object)
                    let (winnerID, loserID) = mineWins ? (mine, theirs) : (theirs, mine)
                    let given = try loser.value(forKey: plan.globalIDKey)
                    let states = try server([winnerID, loserID])
                    let outcome = try merge(
                        loser, into: winner, loserState: states[loserID], winnerState: states[winnerID],
                        pending: pending, in: context)
                    report.conflicts.append(
                        UniquenessConflict(
                            entity: entity.name, key: attribute.name, value: value, kept: winnerID, removed: loserID,
                            repointed: try outcome.repointed.map { try globalID(of: $0) }.sorted {
                                $0.uuidString < $1.uuidString
                            }))
                    for (changed, keys) in outcome.changed where !keys.isEmpty {
                        merges.append(
                            SyncState.PendingMerge(
                                entity: changed.entity.name, primaryKey: changed.objectID.primaryKey,
                                keys: keys.sorted(), stamp: stamp))
                    }
                    tombstones.append(
                        .init(
                            entity: loser.entity.name, globalID: loserID, stamp: stamp,
                            originKey: given.isNull ? loser.objectID.primaryKey : nil))
                    removed.insert(loser.objectID)
                    // The winner's values may have changed: another clash may follow from them.
                    work.append(winner)
                    if loser === object { break }
                }
            }
        }
        return (merges, tombstones)
    }

    /// Merges `loser` into `winner` and deletes it: to-many relationships united, a to-one the winner lacks taken
    /// from the loser, attributes taken where the loser's value is newer (by the server's stamps; a local change
    /// not pushed yet is newest). Returns the objects whose links moved and every object's changed keys.
    func merge(
        _ loser: ManagedObject, into winner: ManagedObject, loserState: ServerObject?, winnerState: ServerObject?,
        pending: [ObjectID: Set<String>], in context: ObjectContext
    ) throws -> (repointed: [ManagedObject], changed: [(ManagedObject, Set<String>)]) {
        func stamp(_ object: ManagedObject, _ state: ServerObject?, _ key: String) -> UInt64 {
            if pending[object.objectID]?.contains(key) == true { return .max }
            return state?.properties[key]?.stamp ?? 0
        }
        var winnerKeys = Set<String>()
        var repointed: [ManagedObject] = []
        var changed: [(ManagedObject, Set<String>)] = []
        for attribute in winner.entity.attributes
        where attribute.name != plan.globalIDKey && !attribute.isTransient && attribute.derivation == nil
            && loser.entity.attribute(attribute.name) != nil
        {
            guard stamp(loser, loserState, attribute.name) > stamp(winner, winnerState, attribute.name) else {
                continue
            }
            let value = try loser.value(forKey: attribute.name)
            if try winner.value(forKey: attribute.name) != value {
                try winner.setValue(value, forKey: attribute.name)
                winnerKeys.insert(attribute.name)
            }
        }
        for relationship in loser.entity.relationships where winner.entity.relationship(relationship.name) != nil {
            if relationship.isToMany {
                // (Objects this pull deletes go with their deletes.)
                for target in try loser.objects(forKey: relationship.name)
                where target.objectID != winner.objectID && !target.isDeleted {
                    try loser.remove(target, fromKey: relationship.name)
                    if try !winner.objectIDs(forKey: relationship.name).contains(target.objectID) {
                        try winner.add(target, toKey: relationship.name)
                    }
                    winnerKeys.insert(relationship.name)
                    repointed.append(target)
                    changed.append((target, [relationship.inverse]))
                }
            } else if let target = try loser.object(forKey: relationship.name), target.objectID != winner.objectID,
                !target.isDeleted
            {
                try loser.setObject(nil, forKey: relationship.name)
                if try winner.object(forKey: relationship.name) == nil {
                    try winner.setObject(target, forKey: relationship.name)
                    winnerKeys.insert(relationship.name)
                    repointed.append(target)
                    changed.append((target, [relationship.inverse]))
                }
            }
        }
        changed.append((winner, winnerKeys))
        try context.delete(loser)
        return (repointed, changed)
    }
}
