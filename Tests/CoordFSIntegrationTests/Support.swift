import CLinux
import CoordFSCommands
import CoordFSMount
import Coordination
import Dispatch
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Where the repository and the built `coordfs` are.
enum Paths {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let scripts = repository.appendingPathComponent("Tests/Scripts")
    static let fio = repository.appendingPathComponent("Tests/fio")
    static var binary: URL {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
                "coordfs"),
            repository.appendingPathComponent(".build/debug/coordfs")
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[1]
    }
}

// @unchecked Sendable: set up once; its session runs on its own thread.
/// A temporary backing directory and mount point, mounted by the real `coordfs mount` (a daemon
/// of its own) or in this process (so its presenters can be registered here). It always
/// unmounts — on `unmount()`, or when it is released, even after a failed expectation.
final class MountFixture: @unchecked Sendable {
    let base: URL
    private(set) var backing: URL
    let mountPoint: URL
    private var session: MountSession?
    private var sessionThread: Thread?
    private var mounted = false
    /// Set by tests that stop the daemon themselves; otherwise a daemon gone before the end fails the test.
    private var daemonMayEnd = false
    let domain: CoordinationDomain?
    /// The filesystem of a mount made in this process.
    var filesystem: Filesystem? { session?.filesystem }

    /// Mounts with `coordfs mount` and `arguments`; `backing` replaces the fresh backing directory;
    /// `softFileLimit` starts the command with that soft open-file limit (as many systems do);
    /// `fileLimit`, with that limit soft and hard (the daemon cannot raise it). `umask`, under
    /// that umask. `user`: mounted by that user, who owns the backing directory and the mount
    /// point, without privileges (through fusermount3, as any user mounts).
    init(
        _ arguments: [String] = [], backingMode: mode_t = 0o755, backing existing: URL? = nil,
        softFileLimit: Int? = nil, fileLimit: Int? = nil, umask daemonMask: mode_t? = nil, user: uid_t? = nil
    ) throws {
        (base, backing, mountPoint) = try Self.makeDirectories(backingMode)
        if let existing { backing = existing }
        domain = nil
        var command = [Paths.binary.path, "mount", backing.path, mountPoint.path] + arguments
        if let daemonMask {
            command = ["/bin/sh", "-c", "umask \(String(daemonMask, radix: 8)); exec \"$0\" \"$@\""] + command
        }
        if let user {
            for directory in [backing, mountPoint] { chown(directory.path, user, gid_t(user)) }
            command = asUser(user) + command
        }
        let limit = fileLimit.map { "--nofile=\($0):\($0)" } ?? softFileLimit.map { "--nofile=\($0):" }
        let result =
            try limit.map { try run("/usr/bin/prlimit", [$0] + command) }
            ?? run(command[0], Array(command.dropFirst()))
        guard result.status == 0 else { throw FixtureError("coordfs mount failed: \(result.errors)") }
        mounted = true
    }

    /// Mounts in this process, with `domain` for presenters registered by the test. (No default
    /// for `configure`: `MountFixture()` must mean the real daemon.)
    init(inProcess configure: (inout MountConfiguration) -> Void) throws {
        (base, backing, mountPoint) = try Self.makeDirectories(0o755)
        let domain = CoordinationDomain()
        self.domain = domain
        var configuration = MountConfiguration(backing: backing.path, mountPoint: mountPoint.path)
        configuration.waitTimeout = .seconds(10)
        configure(&configuration)
        let session = try MountSession(configuration: configuration, domain: domain)
        // Its control socket served as `coordfs mount` serves it.
        session.startControlSocket = { try MountControlServer.start(for: $0) }
        try session.mount(handlingSignals: false)
        self.session = session
        let thread = Thread { session.run() }
        thread.start()
        sessionThread = thread
        mounted = true
    }

    private static func makeDirectories(_ mode: mode_t) throws -> (URL, URL, URL) {
        let base = URL(fileURLWithPath: "/tmp/coordfs-it-\(UUID().uuidString.prefix(8))")
        let backing = base.appendingPathComponent("backing"), mountPoint = base.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: backing, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        chmod(base.path, 0o755)
        chmod(backing.path, mode)
        return (base, backing, mountPoint)
    }

    /// A path inside the mount.
    func path(_ relative: String) -> String { mountPoint.appendingPathComponent(relative).path }
    /// A path inside the backing directory.
    func backingPath(_ relative: String) -> String { backing.appendingPathComponent(relative).path }

    /// Writes a file in the backing directory directly (setup, not coordinated). A daemon that
    /// watches the backing directory tells presenters of it as a change from outside: this
    /// returns once it has, so that presenters registered after hear nothing of it.
    func seed(_ relative: String, _ contents: String = "seed\n") throws {
        let url = backing.appendingPathComponent(relative)
        try settled {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(contents.utf8).write(to: url)
        }
    }

    /// Runs `change`, made straight in the backing directory, and returns once a daemon that
    /// watches the backing directory has told presenters of it.
    /// A mount in this process takes the test's own writes as its own, and a daemon that does
    /// not watch tells nobody: then there is nothing to wait for.
    func settled(_ change: () throws -> Void) throws {
        switch changesToldFromOutside() {
        case nil:
            try change()
        case let before?:
            try change()
            // Told, and nothing more coming: the count has grown and stays.
            var last = before, steady = 0
            let told = eventually(.seconds(5)) {
                let now = changesToldFromOutside() ?? before
                steady = now > before && now == last ? steady + 1 : 0
                last = now
                return steady >= 5
            }
            #expect(told, "the daemon did not tell presenters of a change made in its backing directory")
        }
    }

    /// How many changes from outside the daemon has told; nil for a mount in this process (its
    /// own writes are the mount's) or one that does not watch the backing directory.
    func changesToldFromOutside() -> Int? {
        guard session == nil else { return nil }
        var bytes = [CChar](repeating: 0, count: 8192)
        let count = cfs_getxattr(mountPoint.path, "user.coordfs.stats", &bytes, bytes.count)
        guard count > 0,
            let fields = try? JSONSerialization.jsonObject(with: Data(bytes: bytes, count: count)) as? [String: Int],
            fields["watches_backing"] == 1
        else { return nil }
        return fields["changes_behind"]
    }

    /// The mount's counters, as the root's `user.coordfs.stats` attribute shows them.
    func statistics() throws -> [String: Int] {
        let result = try run(
            "/usr/bin/python3",
            [
                "-c", "import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], 'user.coordfs.stats').decode())",
                mountPoint.path
            ])
        return try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Int] ?? [:]
    }

    /// The engine's state as the mount root's `user.coordfs.state` attribute shows it.
    func state() throws -> String {
        let result = try run(
            "/usr/bin/python3",
            [
                "-c", "import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], 'user.coordfs.state').decode())",
                mountPoint.path
            ])
        return result.output
    }

    /// The test itself ends the daemon (a signal, `coordfs unmount`).
    func daemonWillEnd() { daemonMayEnd = true }

    /// Unmounts and mounts the same backing directory again with `arguments`: a new daemon,
    /// the mount's next life. For mounts made by the `coordfs` command only.
    func mountAgain(_ arguments: [String] = []) throws {
        precondition(session == nil, "mountAgain is for mounts made by the coordfs command")
        unmount()
        let result = try run(Paths.binary.path, ["mount", backing.path, mountPoint.path] + arguments)
        guard result.status == 0 else { throw FixtureError("coordfs mount failed again: \(result.errors)") }
        mounted = true
    }

    func unmount() {
        guard mounted else { return }
        mounted = false
        if let session {
            session.stop()
            while sessionThread?.isFinished == false { usleep(5_000) }
            self.session = nil
        } else {
            // A daemon that died leaves its mount answering ENOTCONN: that fails the test, even
            // when nothing it checked noticed. (statfs, not stat: stat may be answered from cache.)
            var info = statvfs()
            let gone =
                !Self.isMounted(mountPoint.path)
                || (statvfs(mountPoint.path, &info) == -1 && (errno == ENOTCONN || errno == ECONNABORTED))
            if gone && !daemonMayEnd {
                Issue.record("the coordfs daemon of \(mountPoint.path) is gone (crashed?): see dmesg")
            }
            let result = try? run(Paths.binary.path, ["unmount", mountPoint.path])
            if result?.status != 0 { _ = umount2(mountPoint.path, Int32(MNT_DETACH)) }
            // The daemon exits once unmounted.
            _ = eventually(.seconds(5)) { !MountFixture.isMounted(self.mountPoint.path) }
        }
    }

    static func isMounted(_ path: String) -> Bool {
        ((try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? "").contains(" \(path) ")
    }

    deinit {
        unmount()
        try? FileManager.default.removeItem(at: base)
    }
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The words before a command that run it as `user` (and group of the same number), without
/// privileges; its sockets in /tmp/coordfs-UID, as for a user without a runtime directory.
func asUser(_ user: uid_t) -> [String] {
    ["/usr/bin/setpriv", "--reuid=\(user)", "--regid=\(user)", "--clear-groups", "env", "-u", "XDG_RUNTIME_DIR"]
}

/// Runs a program to the end.
@discardableResult
func run(
    _ program: String, _ arguments: [String], environment: [String: String]? = nil
) throws -> (status: Int32, output: String, errors: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let outData = output.fileHandleForReading.readDataToEndOfFile()
    let errData = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (
        process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self)
    )
}

// @unchecked Sendable: its lines are behind `lock`.
/// A child process driven line by line (`hold.py`, a shell), killed when released.
final class Child: @unchecked Sendable {
    let process = Process()
    private let input = Pipe(), output = Pipe()
    private let lock = NSLock()
    private var lines: [String] = []
    private let arrived = DispatchSemaphore(value: 0)

    init(_ program: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let handle = output.fileHandleForReading
        Thread { [weak self] in
            var buffer: [UInt8] = []
            // availableData returns what has arrived; read(upToCount:) would wait for all 4096.
            while case let chunk = handle.availableData, !chunk.isEmpty {
                for byte in chunk {
                    if byte == UInt8(ascii: "\n") {
                        self?.deliver(String(decoding: buffer, as: UTF8.self))
                        buffer = []
                    } else {
                        buffer.append(byte)
                    }
                }
            }
        }.start()
    }

    /// A `hold.py` process.
    static func holder() throws -> Child {
        try Child("/usr/bin/python3", [Paths.scripts.appendingPathComponent("hold.py").path])
    }

    private func deliver(_ line: String) {
        lock.lock(); lines.append(line); lock.unlock()
        arrived.signal()
    }

    func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

    /// Ends the child's standard input.
    func closeInput() { try? input.fileHandleForWriting.close() }

    /// The next line, or nil if none came within `timeout`.
    func next(timeout: Duration = .seconds(10)) -> String? {
        guard arrived.wait(timeout: .now() + timeout.seconds) == .success else { return nil }
        lock.lock(); defer { lock.unlock() }
        return lines.removeFirst()
    }

    /// Sends a command and returns its answer.
    func ask(_ command: String, timeout: Duration = .seconds(10)) -> String? {
        send(command)
        return next(timeout: timeout)
    }

    var pid: Int32 { process.processIdentifier }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for the process to end; its status, or nil if it did not within `timeout`.
    func waitForExit(timeout: Duration = .seconds(10)) -> Int32? {
        eventually(timeout) { !self.process.isRunning } ? process.terminationStatus : nil
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
    }
}

extension LoggingPresenter {
    /// A presenter of `path`, as the mount tests make one: it always hands back a reacquirer, so
    /// "<name>:reacquire" shows that the other process's access has ended.
    convenience init(_ name: String, _ path: String, log: EventLog) {
        self.init(name: name, url: URL(fileURLWithPath: path), log: log, givesReacquirer: true)
    }
}

/// Another user for the tests of a shared mount: nobody (uid and gid 65534, no supplementary
/// groups), through setpriv. `run(Nobody.program, Nobody.arguments(command))` runs `command` so.
enum Nobody {
    static let program = "/usr/bin/setpriv"
    static func arguments(_ command: [String]) -> [String] {
        ["--reuid=65534", "--regid=65534", "--clear-groups"] + command
    }
}

/// A line of `coordfs watch` less who made the access (its " pid=… via=…" end).
func withoutOrigin(_ line: String?) -> String? {
    guard let line else { return nil }
    guard let start = line.range(of: " pid=") ?? line.range(of: " via=") else { return line }
    return String(line[..<start.lowerBound])
}
