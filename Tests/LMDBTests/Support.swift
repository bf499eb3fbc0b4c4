import Foundation
import LMDB
import TestSupport

/// Bytes of a string, for readable keys.
func b(_ string: String) -> [UInt8] { Array(string.utf8) }

/// A string from borrowed bytes.
func s(_ bytes: UnsafeRawBufferPointer?) -> String? { bytes.map { String(decoding: $0, as: UTF8.self) } }

/// Runs `body` with a fresh environment in a temporary directory, then removes it.
func withEnvironment<R>(
    options: Environment.Options = .init(sync: .noSync), _ body: (Environment, TemporaryDirectory) throws -> R
) throws -> R {
    let dir = try TemporaryDirectory()
    defer { dir.remove() }
    let env = try Environment.open(path: dir.path("test.store"), options: options)
    return try body(env, dir)
}

/// Every entry of `db` in `range`, as strings.
func entries(
    _ env: Environment, _ db: Database, _ range: KeyRange = .all, reverse: Bool = false
) throws
    -> [String]
{
    try env.read { txn in
        var result: [String] = []
        try txn.forEach(in: db, range: range, reverse: reverse) { key, value in
            result.append("\(s(key)!)=\(s(value)!)")
            return .continue
        }
        return result
    }
}

/// Catches the LMDBError thrown by `body`.
func lmdbError(_ body: () throws -> Void) -> LMDBError? {
    do {
        try body()
        return nil
    } catch let error as LMDBError {
        return error
    } catch {
        return nil
    }
}

/// A thread-safe counter for tests that run real threads.
final class Counter: @unchecked Sendable {
    // @unchecked Sendable: `count` is only touched while `lock` is held.
    private let lock = NSLock()
    private var count = 0

    func add() { lock.withLock { count += 1 } }

    var value: Int { lock.withLock { count } }
}
