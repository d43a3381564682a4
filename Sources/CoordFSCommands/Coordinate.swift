import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs coordinate --read P --write P -- CMD ARGS`: hold intents while a command runs, like
/// flock(1). The command and its children count as this process, so their own opens of the
/// held items through the mount do not wait on the hold.
struct Coordinate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a command while holding coordinated reads and writes, like flock(1).",
        discussion: """
        The command runs in the foreground, with the terminal; SIGTERM and SIGHUP are passed on \
        to it, and the intents are held until it ends. Exits with the command's status (128+N \
        when signal N ended it); 1 when the intents could not be taken (with the reason); 127 \
        when the command is not found.
        """
    )

    @Option(name: .long, help: "An item to hold for reading (repeatable).")
    var read: [String] = []

    @Option(name: .long, help: "An item to hold for writing (repeatable).")
    var write: [String] = []

    @Option(name: .long, help: "A reading option for every --read: withoutChanges, resolvesSymbolicLink, immediatelyAvailableMetadataOnly.")
    var readOption: [String] = []

    @Option(name: .long, help: "The writing option for every --write: forDeleting, forMoving, forMerging, forReplacing, contentIndependentMetadataOnly.")
    var writeOption: String?

    @Flag(name: [.customShort("n"), .long], help: "Fail at once instead of waiting (as flock -n).")
    var nonblock = false

    @Option(help: "Seconds to wait before giving up (default: the server's).")
    var timeout: Double?

    @Option(help: "The control socket (default: found from the paths).")
    var socket: String?

    @Argument(parsing: .postTerminator, help: "The command and its arguments, after --.")
    var command: [String] = []

    func validate() throws {
        if read.isEmpty && write.isEmpty { throw ValidationError("name at least one --read or --write item") }
        if command.isEmpty { throw ValidationError("name the command to run after --") }
        if let timeout, case .failure(let why) = Seconds.duration(timeout) { throw ValidationError("--timeout: \(why)") }
    }

    func run() throws {
        Signals.resetInherited()
        let resolve = ServerConnection.resolve
        let intents = read.map { WireIntent(path: resolve($0), access: .read, options: readOption.isEmpty ? nil : readOption) }
            + write.map { WireIntent(path: resolve($0), access: .write, options: writeOption.map { [$0] }) }
        if socket == nil {
            for (intent, name) in zip(intents, read + write) { try MountTable.refuseAbandoned(intent.path, named: name) }
        }
        var sockets = Set<String>()
        for intent in intents {
            if let socket { sockets.insert(socket); continue }
            switch ControlClient.serverSocket(for: intent.path) {
            case .success(let found): sockets.insert(found)
            case .failure(let error): throw CommandFailure(error.message)
            }
        }
        guard sockets.count == 1, let socketPath = sockets.first else {
            throw CommandFailure("the items belong to different coordfs mounts")
        }
        let client: ControlClient
        let hold: Int
        do {
            client = try ControlClient(socketPath: socketPath)
            let fields = try client.request { .hold(id: $0, intents: intents, wait: !nonblock, timeout: timeout, inherit: true) }
            guard case .int(let number)? = fields["hold"] else { throw ControlError("EPROTO", "no hold in the reply") }
            hold = number
        } catch {
            // Like flock(1): a conflict is exit status 1, not a usage error.
            FileHandle.standardError.write(Data("Error: cannot take the intents: \(error)\n".utf8))
            throw ExitCode(1)
        }
        let status: Int32
        do {
            status = try ForegroundCommand.run(command)
        } catch {
            _ = try? client.request { .release(id: $0, hold: hold, changed: false) }
            FileHandle.standardError.write(Data("Error: \(error)\n".utf8))
            throw ExitCode(error.exitStatus)
        }
        _ = try? client.request { .release(id: $0, hold: hold, changed: !write.isEmpty) }
        client.close()
        throw ExitCode(status)
    }
}
