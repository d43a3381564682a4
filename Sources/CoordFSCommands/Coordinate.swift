import ArgumentParser
import CoordinationClient
import CoordinationRuntime
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
            to it, and the intents are held until it ends. When another holds an item and -n or \
            --timeout gives up, the error names who holds it. \
            As flock's descriptor form, `coordfs coordinate -x 9` (or -s 9) with no command holds the \
            item the shell's descriptor 9 is open on (exec 9>>FILE) for the shell and its children, \
            until the shell closes it (exec 9>&-) or ends; it returns once the hold is taken. \
            Exit status, as flock's: the command's (128+N when signal N ended it); 1 when the intents \
            could not be taken, with the reason; 127 when the command is not found; the \
            --conflict-exit-code (default 1) when another holds an item and -n or --timeout gives up; \
            64 for a command line it cannot take; 75 when the command succeeded but its turn was not \
            its alone: an access went ahead past the hold (another user's, after the mount's lock or \
            break time), or on a host of a shared store the hold lost its cover while it ran.
            """
    )

    @Option(
        name: [.customShort("s"), .long], help: "An item to hold for reading (repeatable; -s as flock's shared lock).",
        completion: .file())
    var read: [String] = []

    @Option(
        name: [.customShort("x"), .long],
        help:
            "An item to hold for writing (repeatable; -x as flock's exclusive lock). A directory is held as an item, not what is inside it, unless the write option is forDeleting, forMoving or forReplacing.",
        completion: .file())
    var write: [String] = []

    @Option(
        name: .long,
        help:
            "A reading option for every --read: withoutChanges, resolvesSymbolicLink, immediatelyAvailableMetadataOnly.",
        completion: .list(["withoutChanges", "resolvesSymbolicLink", "immediatelyAvailableMetadataOnly"]))
    var readOption: [String] = []

    @Option(
        name: .long,
        help:
            "The writing option for every --write: forDeleting, forMoving, forMerging, forReplacing, contentIndependentMetadataOnly, forEvicting (presenters are asked to accommodate an eviction of the local content).",
        completion: .list([
            "forDeleting", "forMoving", "forMerging", "forReplacing", "contentIndependentMetadataOnly", "forEvicting"
        ]))
    var writeOption: String?

    @Flag(name: [.customShort("n"), .long], help: "Fail at once instead of waiting (as flock -n).")
    var nonblock = false

    @Option(
        name: [.customShort("w"), .long],
        help:
            "Seconds to wait before giving up (default: the server's wait timeout, a mount's --wait-timeout, 60 s unless set; as flock -w). Another user's holds and open files keep it waiting at most the mount's break time."
    )
    var timeout: Double?

    @Option(
        name: [.customShort("E"), .long],
        help: "The exit status when another holds an item and -n or --timeout gives up (default 1, as flock -E).")
    var conflictExitCode: Int32 = 1

    @Option(
        name: [.customShort("c"), .long],
        help: "Run this command line with /bin/sh -c instead of a command after -- (as flock -c).")
    var commandLine: String?

    @Option(help: "The control socket (default: found from the paths).", completion: .file())
    var socket: String?

    @Flag(
        name: [.customShort("v"), .long],
        help:
            "Say on standard error whom the hold waits for once it has waited a second, how long taking it took, and the command run (as flock --verbose)."
    )
    var verbose = false

    @Flag(
        name: [.customShort("o"), .customLong("close")],
        help:
            "The command does not act as the holder: its own opens of the held items wait for the hold like anyone else's (as flock -o keeps the lock from the command)."
    )
    var close = false

    /// The descriptor form's holder, run in the background: the shell it holds for.
    @Option(help: .hidden)
    var holdFor: Int32?

    /// The descriptor form's holder: where it says whether the hold was taken.
    @Option(help: .hidden)
    var reportTo: Int32?

    @Argument(parsing: .postTerminator, help: "The command and its arguments, after --.")
    var command: [String] = []

    func validate() throws {
        if read.isEmpty && write.isEmpty { throw ValidationError("name at least one --read or --write item") }
        if command.isEmpty && commandLine == nil && descriptor == nil {
            throw ValidationError(
                "name the command to run after --, or give -c 'COMMAND' (or, as flock, -x or -s with a descriptor number alone)"
            )
        }
        if !command.isEmpty && commandLine != nil {
            throw ValidationError("give the command after -- or with -c, not both")
        }
        if !(0...255).contains(conflictExitCode) { throw ValidationError("--conflict-exit-code must be from 0 to 255") }
        if let timeout, case .failure(let why) = Seconds.duration(timeout) {
            throw ValidationError("--timeout: \(why)")
        }
    }

    /// flock's descriptor form: one -s or -x whose value is a number, and no command.
    var descriptor: Int32? {
        guard command.isEmpty, commandLine == nil, read.count + write.count == 1, let value = (read + write).first,
            !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int32(value)
    }

    func run() throws {
        Signals.resetInherited()
        if let descriptor { return try holdDescriptor(descriptor) }
        let resolve = ServerConnection.resolve
        let intents =
            read.map { WireIntent(path: resolve($0), access: .read, options: readOption.isEmpty ? nil : readOption) }
            + write.map { WireIntent(path: resolve($0), access: .write, options: writeOption.map { [$0] }) }
        if socket == nil {
            for (intent, name) in zip(intents, read + write) {
                try MountTable.refuseAbandoned(intent.path, named: name)
                try MountTable.refusePrivate(intent.path, named: name)
                try MountTable.refuseBacking(intent.path, named: name)
            }
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
        let breaks: BreakWatch
        let hold: Int
        let started = ContinuousClock.now
        let report = verbose && !nonblock ? Self.sayWhomItWaitsFor(getpid(), at: socketPath) : nil
        defer { report?.cancel() }
        do {
            client = try ControlClient(socketPath: socketPath)
            breaks = BreakWatch(client)
            let fields = try client.request {
                .hold(id: $0, intents: intents, wait: !nonblock, timeout: timeout, inherit: !close)
            }
            guard case .int(let number)? = fields["hold"] else { throw ControlError("EPROTO", "no hold in the reply") }
            hold = number
        } catch {
            // Like flock(1): a conflict is its own exit status (-E), not a usage error.
            let conflict = (error as? ControlError).map { $0.errno == "EAGAIN" || $0.errno == "EBUSY" } ?? false
            let holders = conflict ? Self.holders(of: intents.map(\.path), at: socketPath) : ""
            FileHandle.standardError.write(Data("Error: cannot take the intents: \(error)\(holders)\n".utf8))
            throw ExitCode(conflict ? conflictExitCode : 1)
        }
        report?.cancel()
        let words = commandLine.map { ["/bin/sh", "-c", $0] } ?? command
        if verbose {
            let took = (ContinuousClock.now - started).logText
            FileHandle.standardError.write(
                Data(
                    "coordfs coordinate: taking the intents took \(took)\ncoordfs coordinate: running \(words.joined(separator: " "))\n"
                        .utf8))
        }
        let status: Int32
        do {
            status = try ForegroundCommand.run(words)
        } catch {
            _ = try? client.request { .release(id: $0, hold: hold, changed: false) }
            FileHandle.standardError.write(Data("Error: \(error)\n".utf8))
            throw ExitCode(error.exitStatus)
        }
        let released = try? client.request { .release(id: $0, hold: hold, changed: !write.isEmpty) }
        client.close()
        throw ExitCode(Self.status(status, afterRelease: released, breaks))
    }

    /// -v: once the hold of `pid` has waited a second, a line on standard error naming whom it
    /// waits for (asked of the server on a connection of its own), as flock --verbose says it
    /// waits. Cancelled once the wait has ended; a hold no longer waiting by then says nothing.
    static func sayWhomItWaitsFor(_ pid: Int32, at socketPath: String) -> DispatchWorkItem {
        let item = DispatchWorkItem {
            guard let whom = Coordinate.whom(waiterOf: pid, at: socketPath) else { return }
            FileHandle.standardError.write(Data("coordfs coordinate: waiting for \(whom)\n".utf8))
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 1, execute: item)
        return item
    }

    /// Whom `pid`'s waiting hold waits for, from the server's status: "pid 42 (vim), which holds
    /// '/m/doc.txt' for write", "the presenter of '/m/doc.txt', pid 7 (editor), to answer"; nil
    /// when it waits no longer.
    static func whom(waiterOf pid: Int32, at socketPath: String) -> String? {
        guard let client = try? ControlClient(socketPath: socketPath),
            let fields = try? client.wholeStatus()
        else { return nil }
        defer { client.close() }
        func entries(_ key: String) -> [[String: WireValue]] {
            guard case .array(let list)? = fields[key] else { return [] }
            return list.compactMap { if case .object(let entry) = $0 { entry } else { nil } }
        }
        func text(_ value: WireValue?) -> String? { if case .string(let text)? = value { text } else { nil } }
        func who(_ entry: [String: WireValue]) -> String {
            guard case .int(let pid)? = entry["pid"] else { return text(entry["identity"]) ?? "another coordinator" }
            return "pid \(pid)" + (text(entry["command"]).map { " (\($0))" } ?? "")
        }
        guard let waiter = entries("waiters").first(where: { $0["pid"] == .int(Int(pid)) }),
            case .array(let awaited)? = waiter["waits_for"], !awaited.isEmpty
        else { return nil }
        let holders = entries("holders"), presenters = entries("presenters")
        let named = awaited.compactMap(text).map { identity -> String in
            if let holder = holders.first(where: { text($0["identity"]) == identity }) {
                let held: [String] =
                    if case .array(let intents)? = holder["intents"] {
                        intents.compactMap { intent in
                            guard case .object(let fields) = intent, let mode = text(fields["mode"]) else { return nil }
                            return
                                "\(text(fields["path"]).map { "'\($0)'" } ?? "an item in a directory you cannot read") for \(mode)"
                        }
                    } else { [] }
                return who(holder) + (held.isEmpty ? "" : ", which holds " + held.joined(separator: " and "))
            }
            if let presenter = presenters.first(where: { text($0["identity"]) == identity }) {
                let item = text(presenter["path"]).map { "'\($0)'" } ?? "an item in a directory you cannot read"
                return "the presenter of \(item), \(who(presenter)), to answer"
            }
            return Status.blocker(identity)
        }
        return named.joined(separator: "; ")
    }

    /// Who holds `paths` now, as "; '/m/doc.txt' is held for write by pid 42 (vim)" clauses:
    /// what a user asks next after a refusal.
    static func holders(of paths: [String], at socketPath: String) -> String {
        guard let client = try? ControlClient(socketPath: socketPath),
            let fields = try? client.wholeStatus(),
            case .array(let holders)? = fields["holders"]
        else { return "" }
        defer { client.close() }
        var clauses: [String] = []
        for case .object(let holder) in holders {
            var who = "another coordinator"
            if case .int(let pid)? = holder["pid"] {
                who = "pid \(pid)"
                if case .string(let command)? = holder["command"] { who += " (\(command))" }
            }
            guard case .array(let intents)? = holder["intents"] else { continue }
            for case .object(let intent) in intents {
                guard case .string(let path)? = intent["path"],
                    paths.contains(where: { $0 == path || $0.hasPrefix(path + "/") || path.hasPrefix($0 + "/") }),
                    case .string(let mode)? = intent["mode"]
                else { continue }
                clauses.append("'\(path)' is held for \(mode) by \(who)")
            }
        }
        return clauses.isEmpty ? "" : "; " + clauses.joined(separator: "; ")
    }
}
