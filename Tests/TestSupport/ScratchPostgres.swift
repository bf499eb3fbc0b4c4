import Foundation

/// A real PostgreSQL server in a scratch cluster, for the sync tests: `initdb` into a temporary directory, then
/// `pg_ctl start` listening on a Unix socket in that directory only (no TCP port, so parallel tests and a system
/// server never collide). Run as the `postgres` user when the tests run as root (the server refuses root).
///
/// ```swift
/// let server = try ScratchPostgres()
/// defer { server.remove() }
/// let sync = try SyncEngine(store: store, configuration: .init(connection: server.connection))
/// ```
public final class ScratchPostgres: @unchecked Sendable {
    /// Why a test cannot have a server (PostgreSQL is not installed).
    public struct Unavailable: Error, CustomStringConvertible {
        public var description: String
    }

    /// The cluster's directory (also its socket directory).
    public let directory: String
    /// The port that names the socket.
    public let port: Int
    private let binaries: String
    private let user: String?

    /// The directory of PostgreSQL's server programs, if installed (Debian: /usr/lib/postgresql/N/bin).
    public static var binariesDirectory: String? {
        let base = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
        return versions.sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }.map { "\(base)/\($0)/bin" }
            .first { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }
    }

    /// Whether a scratch server can be started here.
    public static var isAvailable: Bool { binariesDirectory != nil }

    /// The libpq connection string of the server.
    public var connection: String { "host=\(directory) port=\(port) dbname=postgres user=\(user ?? NSUserName())" }

    /// Makes and starts a cluster.
    public init() throws {
        guard let binaries = Self.binariesDirectory else {
            throw Unavailable(
                description:
                    "PostgreSQL's server is not installed (apt-get install postgresql); `make test` installs it")
        }
        self.binaries = binaries
        user = getuid() == 0 ? "postgres" : nil
        var template = Array("/tmp/es-pg-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw Unavailable(description: "cannot make a directory in /tmp for PostgreSQL")
        }
        directory = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        port = Int.random(in: 20000..<60000)
        if let user {
            guard let account = getpwnam(user), chown(directory, account.pointee.pw_uid, account.pointee.pw_gid) == 0
            else { throw Unavailable(description: "cannot give \(directory) to the user \(user)") }
        }
        try run(
            "initdb", ["-D", directory + "/data", "-A", "trust", "-U", user ?? NSUserName(), "--no-sync", "-E", "UTF8"])
        try start()
    }

    /// Starts the server (again, after ``stop(immediately:)``).
    public func start() throws {
        try run(
            "pg_ctl",
            [
                "-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "30", "-o",
                "-k \(directory) -p \(port) -c listen_addresses='' -c fsync=off -c max_connections=50",
                "start",
            ])
    }

    /// Stops the server: `fast` rolls back open transactions and closes connections; `immediately` kills it as a
    /// crash would.
    public func stop(immediately: Bool = false) throws {
        try run("pg_ctl", ["-D", directory + "/data", "-m", immediately ? "immediate" : "fast", "-w", "stop"])
    }

    /// Runs SQL as the cluster's superuser (`psql`), and returns what it printed (unaligned, tuples only).
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") throws -> String {
        let output = directory + "/psql.out"
        try run(
            "psql",
            [
                "-h", directory, "-p", "\(port)", "-U", user ?? NSUserName(), "-d", database, "-X", "-q", "-A", "-t",
                "-v", "ON_ERROR_STOP=1", "-c", sql,
            ])
        return (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    }

    /// The connection string of `role` with `password` (over the cluster's socket).
    public func connection(as role: String, password: String? = nil, database: String = "postgres") -> String {
        "host=\(directory) port=\(port) dbname=\(database) user=\(role)" + (password.map { " password=\($0)" } ?? "")
    }

    /// Makes `role` sign in with a password (SCRAM) over the socket, where every other role is trusted: a line
    /// ahead of the others in `pg_hba.conf`, then a reload.
    public func requirePassword(for role: String) throws {
        let path = directory + "/data/pg_hba.conf"
        let existing = try String(contentsOfFile: path, encoding: .utf8)
        try ("local all \(role) scram-sha-256\n" + existing).write(toFile: path, atomically: false, encoding: .utf8)
        try run("pg_ctl", ["-D", directory + "/data", "reload"])
        // The server takes the new rules when it has handled the reload: until a sign-in without a password fails.
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            do {
                try run(
                    "psql",
                    ["-h", directory, "-p", "\(port)", "-U", role, "-d", "postgres", "-X", "-w", "-c", "SELECT 1"])
                usleep(20_000)
            } catch {
                return
            }
        }
        throw Unavailable(description: "the server did not take the password rule for \(role)")
    }

    /// Stops the server (if running) and removes the cluster.
    public func remove() {
        _ = try? run("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a server program with its output in a file (`posix_spawn` and `waitpid`: the server `pg_ctl` starts
    /// keeps the descriptors it inherited, so a pipe would never reach its end).
    private func run(_ program: String, _ arguments: [String]) throws {
        let argv = (user.map { ["/usr/sbin/runuser", "-u", $0, "--"] } ?? []) + [binaries + "/" + program] + arguments
        let outputPath = directory + "/\(program).out"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, environ)
        guard spawned == 0 else {
            throw Unavailable(description: "cannot start \(argv[0]): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
            throw Unavailable(
                description: "\(program) \(arguments.joined(separator: " ")) failed: \(text)\n\(log.suffix(2000))")
        }
    }
}
