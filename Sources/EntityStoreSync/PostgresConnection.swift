import CLibPQ
import Foundation

/// One connection to PostgreSQL through libpq: text parameters in, text cells out, every failure a ``SyncError``
/// that quotes the server's message.
///
/// Not `Sendable`: the engine uses a connection from one thread at a time (under its own lock).
final class PostgresConnection {
    private let handle: OpaquePointer

    /// Connects with a libpq connection string (`host=/tmp port=5432 dbname=app user=app connect_timeout=5`).
    ///
    /// - Throws: ``SyncError/Code/configurationInvalid`` for a string libpq cannot parse or an unknown database or
    ///   user, ``SyncError/Code/authenticationFailed`` when the server refuses the credentials (or the TLS
    ///   certificate does not verify), ``SyncError/Code/serverUnavailable`` otherwise; each naming what libpq said.
    init(_ connection: String) throws {
        var parseError: UnsafeMutablePointer<CChar>?
        if let options = PQconninfoParse(connection, &parseError) {
            PQconninfoFree(options)
        } else {
            let message = parseError.map { String(cString: $0) } ?? "libpq could not parse it"
            if let parseError { PQfreemem(parseError) }
            throw SyncError(
                .configurationInvalid,
                "the connection string is invalid: \(message.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        guard let handle = PQconnectdb(connection) else {
            throw SyncError(.serverUnavailable, "libpq could not allocate a connection")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = Self.message(of: handle)
            PQfinish(handle)
            throw SyncError(Self.code(ofConnectionFailure: message), "cannot connect to PostgreSQL: \(message)")
        }
        self.handle = handle
        // Notices (e.g. "relation already exists, skipping") are not errors; libpq prints them to stderr otherwise.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// What kind of failure a connection's libpq message tells (libpq gives no SQLSTATE for a failed connection;
    /// the server's messages at connection time are in English until a session sets its language).
    static func code(ofConnectionFailure message: String) -> SyncError.Code {
        let authentication = [
            "password authentication failed", "authentication failed", "no pg_hba.conf entry",
            "no password supplied", "password is required", "certificate", "SSL error", "server does not support SSL",
        ]
        if authentication.contains(where: { message.localizedCaseInsensitiveContains($0) }) {
            return .authenticationFailed
        }
        // (A host name that does not resolve is not among them: an offline machine cannot resolve any.)
        let configuration = ["does not exist", "invalid connection option"]
        if configuration.contains(where: { message.localizedCaseInsensitiveContains($0) }) {
            return .configurationInvalid
        }
        return .serverUnavailable
    }

    /// Whether the connection is still up (a server restart breaks it).
    var isOpen: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Runs one statement with `$1`-style text parameters (`nil` is SQL NULL) and returns its rows.
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = []) throws -> PostgresRows {
        let copies: [UnsafeMutablePointer<CChar>?] = parameters.map { $0.map { strdup($0) } }
        defer { for copy in copies { free(copy) } }
        // Without parameters, `PQexec` (which also runs several statements, as the server schema's script has).
        let result =
            parameters.isEmpty
            ? PQexec(handle, sql)
            : copies.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: UnsafePointer<CChar>?.self) { values in
                    PQexecParams(handle, sql, Int32(parameters.count), nil, values.baseAddress, nil, nil, 0)
                }
            }
        guard let result else {
            throw SyncError(.serverUnavailable, "PostgreSQL did not answer: \(Self.message(of: handle))")
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            return PostgresRows(result)
        default:
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
            // Class 08 is a connection failure, 57P0x the server shutting down; an error without a state is
            // libpq's own (the server closed the connection).
            let lost = !isOpen || state.isEmpty || state.hasPrefix("08") || state.hasPrefix("57P")
            throw SyncError(
                lost ? .serverUnavailable : .server,
                "PostgreSQL refused \(Self.summary(of: sql)): \(message.isEmpty ? Self.message(of: handle) : message)"
                    + (state.isEmpty ? "" : " (SQLSTATE \(state))"))
        }
    }

    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws.
    func transaction<R>(readOnly: Bool = false, _ body: () throws -> R) throws -> R {
        try execute(readOnly ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN")
        let result: R
        do {
            result = try body()
        } catch {
            if isOpen {
                // The rollback's own failure would hide the error that caused it: that one is thrown.
                _ = PQexec(handle, "ROLLBACK").map { PQclear($0) }
            }
            throw error
        }
        try execute("COMMIT")
        return result
    }

    /// Starts listening on `channel` (`NOTIFY` from other connections then wakes ``waitForNotification(timeout:alsoWatching:)``).
    func listen(_ channel: String) throws { try execute("LISTEN \(channel)") }

    /// Waits up to `timeout` seconds for a notification, or for `other` to become readable.
    ///
    /// - Returns: Whether a notification arrived (all that arrived are consumed).
    func waitForNotification(timeout: Double, alsoWatching other: Int32) throws -> Bool {
        if consumeNotifications() { return true }
        let socket = PQsocket(handle)
        guard socket >= 0 else { throw SyncError(.serverUnavailable, "the PostgreSQL connection is closed") }
        var descriptors = [
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0), pollfd(fd: other, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&descriptors, 2, Int32(min(Double(Int32.max), max(0, timeout * 1000))))
        guard ready > 0, descriptors[0].revents != 0 else { return false }
        guard PQconsumeInput(handle) == 1 else {
            throw SyncError(.serverUnavailable, "lost the PostgreSQL connection: \(Self.message(of: handle))")
        }
        return consumeNotifications()
    }

    private func consumeNotifications() -> Bool {
        var any = false
        while let notification = PQnotifies(handle) {
            any = true
            PQfreemem(notification)
        }
        return any
    }

    private static func message(of handle: OpaquePointer) -> String {
        guard let text = PQerrorMessage(handle) else { return "unknown error" }
        let message = String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
        return message.isEmpty ? "unknown error" : message
    }

    /// The statement's first words, to name it in an error.
    private static func summary(of sql: String) -> String {
        let words = sql.split(whereSeparator: \.isWhitespace).prefix(3).joined(separator: " ")
        return "'\(words)…'"
    }
}

/// The rows of a result, as text (`nil` for NULL).
struct PostgresRows {
    let rows: [[String?]]

    init(_ result: OpaquePointer) {
        let count = Int(PQntuples(result))
        let columns = Int(PQnfields(result))
        var rows: [[String?]] = []
        rows.reserveCapacity(count)
        for row in 0..<count {
            var cells: [String?] = []
            cells.reserveCapacity(columns)
            for column in 0..<columns {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    cells.append(nil)
                } else {
                    cells.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(cells)
        }
        self.rows = rows
    }
}

/// PostgreSQL's text form of an array parameter (`{"a","b",NULL}`), for `unnest($1::text[])`.
func postgresArray(_ values: [String?]) -> String {
    var out: [UInt8] = [UInt8(ascii: "{")]
    out.reserveCapacity(values.count * 40)
    for (i, value) in values.enumerated() {
        if i > 0 { out.append(UInt8(ascii: ",")) }
        guard let value else {
            out += Array("NULL".utf8)
            continue
        }
        out.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }
    out.append(UInt8(ascii: "}"))
    return String(decoding: out, as: UTF8.self)
}
