import Foundation

/// The size of a long or randomized test: reduced in `make test`, so that the whole suite runs in a few minutes
/// on a busy machine, and full in `make stress` (`ENTITYSTORE_STRESS=1`), which CI runs after it. Every capability
/// is exercised in both; only the amount of random work (rounds, seeds, kills, copies) differs.
public enum TestScale {
    /// Whether this run is `make stress`.
    public static let isStress = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] != nil

    /// `quick` in `make test`, `full` in `make stress`.
    public static func size<T>(_ quick: T, stress full: T) -> T { isStress ? full : quick }

    /// The seeds `0..<quick` in `make test`, `0..<full` in `make stress`.
    public static func seeds(_ quick: Int, stress full: Int) -> [UInt64] {
        (0..<UInt64(size(quick, stress: full))).map { $0 }
    }
}
