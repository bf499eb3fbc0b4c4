import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct ErrorTests {
    @Test func aMissingDatabaseIsNamedInTheError() throws {
        try withEnvironment { env, _ in
            let error = lmdbError { _ = try env.openDatabase("nowhere", create: false) }
            #expect(error?.code == .databaseNotFound)
            #expect(error?.message.contains("'nowhere'") == true)
        }
    }

    @Test func aKeyOverTheLimitIsRefusedWithItsSizeAndTheDatabase() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            #expect(env.maxKeySize == 511)
            let long = [UInt8](repeating: 65, count: 512)
            let error = lmdbError { try env.write { txn in try txn.put(long, b("v"), in: db) } }
            #expect(error?.code == .badValueSize)
            #expect(error?.message == "a key of 512 bytes exceeds LMDB's limit of 511 bytes")
            #expect(error?.context.contains("'things'") == true)
            let readError = lmdbError { _ = try env.read { try $0.get(long, in: db) } }
            #expect(readError?.code == .badValueSize)
            let empty = lmdbError { try env.write { txn in try txn.put([], b("v"), in: db) } }
            #expect(empty?.code == .badValueSize)
            // The maximum itself is fine.
            try env.write { txn in try txn.put(Array(long.dropLast()), b("v"), in: db) }
        }
    }

    @Test func aWriteInAReadOnlyEnvironmentIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("ro.store")
        do {
            let env = try Environment.open(path: path)
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("a"), b("1"), in: db) }
        }
        let readOnly = try Environment.open(path: path, options: .init(readOnly: true))
        let db = try readOnly.openDatabase("things", create: true)
        #expect(try entries(readOnly, db) == ["a=1"])
        let error = lmdbError { try readOnly.write { txn in try txn.put(b("b"), b("2"), in: db) } }
        #expect(error?.code == .readOnly)
        let upgrade = lmdbError { _ = try Environment.open(path: path) }
        #expect(upgrade?.code == .alreadyOpen)
        let missing = lmdbError { _ = try readOnly.openDatabase("other") }
        #expect(missing?.code == .databaseNotFound)
    }

    @Test func aReadOnlyOpenOfAMissingStoreCreatesNothing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let error = lmdbError { _ = try Environment.open(path: dir.path("absent"), options: .init(readOnly: true)) }
        #expect(error?.code == .noSuchFile)
        #expect(!FileManager.default.fileExists(atPath: dir.path("absent")))
    }

    @Test func aTransactionUsedAfterItsClosureIsMisuse() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("a"), b("1"), in: db) }
            let escaped = try env.read { $0 }
            let error = lmdbError { _ = try escaped.get(b("a"), in: db) }
            #expect(error?.code == .misuse)
            // Its ID and a cursor's duplicate count read freed memory before: now they are misuse too.
            #expect(lmdbError { _ = try escaped.id }?.code == .misuse)
            let dup = try env.openDatabase("dups", dupSort: true)
            try env.write { txn in try txn.put(b("k"), b("v"), in: dup) }
            let cursor = try env.read { txn in
                try txn.withCursor(on: dup) { cursor in
                    _ = try cursor.first()
                    return cursor
                }
            }
            #expect(lmdbError { _ = try cursor.duplicateCount() }?.code == .misuse)
        }
    }

    @Test func aWriteNestedInAWriteOnTheSameThreadIsMisuseNotADeadlock() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            let error = lmdbError {
                try env.write { _ in try env.write { txn in try txn.put(b("a"), b("1"), in: db) } }
            }
            #expect(error?.code == .misuse)
        }
    }

    @Test func reopeningADatabaseWithOtherFlagsIsIncompatible() throws {
        try withEnvironment { env, _ in
            _ = try env.openDatabase("plain")
            let error = lmdbError { _ = try env.openDatabase("plain", dupSort: true) }
            #expect(error?.code == .incompatible)
        }
    }

    @Test func errorsDescribeCodeMessageAndContext() {
        let error = LMDBError(lmdbCode: -30792, context: "mdb_put in database 'x'")
        #expect(error.code == .mapFull)
        #expect(error.description.hasPrefix("MDB_MAP_FULL: "))
        #expect(error.description.hasSuffix("(mdb_put in database 'x')"))
    }
}
