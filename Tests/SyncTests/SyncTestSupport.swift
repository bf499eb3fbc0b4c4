import EntityStoreSync

/// Syncs each engine in turn until a whole pass pushes and pulls nothing, at most `passes` passes; whether it got
/// there.
func syncUntilQuiet(_ engines: [SyncEngine], passes: Int = 10) throws -> Bool {
    for _ in 0..<passes {
        var quiet = true
        for engine in engines {
            let report = try engine.syncNow()
            if report.pushedChanges > 0 || report.pulledObjects > 0 { quiet = false }
        }
        if quiet { return true }
    }
    return false
}
