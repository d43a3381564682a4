import LinuxSystem
import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs vend NAME PATH -- CMD ARGS`: a provider, as inetd is: every connection runs CMD with
/// the connection as its standard input and output.
struct Vend: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Vend a named service for an item and everything inside it; each connection runs a command.",
        discussion: """
            Each connection runs the command with the connected socket as its standard input and \
            output, as inetd runs one, with COORDFS_SERVICE, COORDFS_ITEM, and the client's \
            COORDFS_CLIENT_PID, COORDFS_CLIENT_UID, COORDFS_CLIENT_GID (from the socket's \
            credentials) and COORDFS_CLIENT_COMMAND in its environment. At most --max-connections \
            commands run at once, as systemd's MaxConnections=: a connection past them is closed at \
            once, and a line on standard error says so. Runs until interrupted: the service ends \
            with it; connections being served stay with their commands. A second vend of a name \
            you already vend for the same item is refused (EEXIST). \
            Exit status: 1 when the service cannot be vended, or once its server ends (the mount is \
            unmounted), with the reason on standard error; 64 for a command line it cannot take. \
            SIGINT and SIGTERM end it as they end any program.
            """
    )

    @Argument(help: "The service's name (reverse-DNS by convention, at most 255 bytes).")
    var name: String

    @Argument(help: "The item (usually a directory) the service is for.", completion: .file())
    var path: String

    @Option(help: "The control socket (default: found from the path).")
    var socket: String?

    @Option(
        help:
            "Commands that may run at once; a connection past them is closed (default 64, as systemd's MaxConnections=)."
    )
    var maxConnections: Int = 64

    @Argument(parsing: .postTerminator, help: "The command each connection runs, after --.")
    var command: [String] = []

    func validate() throws {
        if name.isEmpty { throw ValidationError("a service name cannot be empty") }
        if name.utf8.count > 255 { throw ValidationError("a service name is at most 255 bytes") }
        if name.contains(where: \.isNewline) { throw ValidationError("a service name cannot hold a newline") }
        if command.isEmpty { throw ValidationError("name the command to run for each connection after --") }
        if maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
    }

    func run() throws {
        Signals.resetInherited()
        Self.keepInheritedDescriptors()
        let resolved = ServerConnection.resolve(path)
        let client = try ServerConnection.connect(for: resolved, explicit: socket)
        let command = self.command, limit = maxConnections
        let running = RunningCount()
        client.onServiceConnection { record, connection in
            guard running.value.add(1, ordering: .relaxed).newValue <= limit else {
                running.value.subtract(1, ordering: .relaxed)
                try? connection.close()
                let who = record.origin?.pid.map { " from pid \($0)" } ?? ""
                FileHandle.standardError.write(
                    Data("coordfs vend: \(limit) connections are being served; one\(who) was closed\n".utf8))
                return
            }
            Thread {
                Vend.serve(connection, record, command)
                running.value.subtract(1, ordering: .relaxed)
            }.start()
        }
        let ended = DispatchSemaphore(value: 0)
        client.onEnd { ended.signal() }
        do {
            _ = try client.request { .vend(id: $0, name: name, path: resolved) }
        } catch {
            throw CommandFailure("cannot vend '\(name)': \(error)")
        }
        FileHandle.standardError.write(Data("vending \(name) for \(resolved)\n".utf8))
        ended.wait()
        throw ServerConnection.closed(client)
    }

    /// Marks every descriptor this process was started with, beyond the standard three,
    /// close-on-exec: a connection's command gets the connection and nothing the provider was
    /// handed by whoever started it.
    static func keepInheritedDescriptors() {
        guard let open = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0 && flags & FD_CLOEXEC == 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    /// Runs the command for one connection, as inetd does: the connected socket is its standard
    /// input and output, and it gets no other descriptor of ours. (Through Foundation's
    /// `Process` it got relayed pipes and a stray socket of Process's own.) The provider lets
    /// go of its copy: the connection ends when the command closes it.
    static func serve(_ connection: FileHandle, _ record: EventRecord, _ command: [String]) {
        let socket = connection.fileDescriptor
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_SERVICE"] = record.name
        environment["COORDFS_ITEM"] = record.path
        environment["COORDFS_CLIENT_PID"] = String(record.cookie)
        if let uid = record.origin?.uid { environment["COORDFS_CLIENT_UID"] = String(uid) }
        if let gid = record.origin?.gid { environment["COORDFS_CLIENT_GID"] = String(gid) }
        if let command = record.origin?.command { environment["COORDFS_CLIENT_COMMAND"] = command }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, socket, 0)
        posix_spawn_file_actions_adddup2(&actions, socket, 1)
        let argv = command.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        // A process group of its own: a Ctrl-C or a hang-up meant for the provider leaves the
        // connections being served alone.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        var pid: pid_t = 0
        let failure = posix_spawnp(&pid, command[0], &actions, &attributes, argv, envp)
        try? connection.close()
        guard failure == 0 else {
            FileHandle.standardError.write(
                Data("coordfs vend: cannot run \(command[0]): \(String(cString: strerror(failure)))\n".utf8))
            return
        }
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
    }
}

/// The connections being served, shared by the threads that serve them.
private final class RunningCount: Sendable {
    let value = Atomic<Int>(0)
}
