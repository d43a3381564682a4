import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
import LinuxSystem

/// `coordfs status [MOUNTPOINT]`: who holds what, who waits, who presents, like lslocks.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show who holds, who waits and who presents, like lslocks.",
        discussion: """
            Exit status: 0; listing every server, 0 when at least one could be read (each that could \
            not gets a warning: line on standard error); 1 when the path or socket named cannot be \
            read, or no server could be, with the reason on standard error; 64 for a command line it \
            cannot take.
            """
    )

    @Argument(
        help:
            "A coordfs mount point or any path inside one (default: the current directory's mount, else every coordfs mount and the daemon).",
        completion: .file())
    var path: String?

    @Option(help: "The control socket (default: found from the path).", completion: .file())
    var socket: String?

    @Flag(
        name: [.customShort("J"), .long],
        help: "As JSON, one object a line, one line a server (docs/json.md), narrowed by PATH and -p as the table is.")
    var json = false

    @Option(
        name: [.short, .customLong("output")], parsing: .unconditional,
        help: ArgumentHelp(
            "The columns to show, comma-separated, as lslocks takes them: \(Column.allCases.map(\.rawValue).joined(separator: ",")); a leading + adds them to the default ones.",
            valueName: "LIST"),
        completion: .list(Column.allCases.map(\.rawValue)))
    var output: String?

    @Flag(name: .customLong("output-all"), help: "Show every column.")
    var outputAll = false

    @Flag(name: [.short, .customLong("noheadings")], help: "Print no line of column names.")
    var noHeadings = false

    @Flag(name: [.short, .long], help: "Columns one space apart, unaligned, with spaces inside values written \\x20.")
    var raw = false

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("Only the holders, waiters and presenters of this process.", valueName: "PID"))
    var pid: Int32?

    @Flag(name: [.short, .long], help: "Also how the mount's requests come, and how many it coordinated.")
    var verbose = false

    @Flag(
        help:
            "List the coordfs mounts instead, one a line, as findmnt does: where, the backing directory, the daemon's pid, how many hold, wait, present and vend services, the files open, and the control socket (-n, -r and -J as for the table)."
    )
    var mounts = false

    /// A column of the table, as lslocks names its own where the meaning is the same.
    enum Column: String, CaseIterable {
        case type = "TYPE", pid = "PID", command = "COMMAND", mode = "MODE", waited = "WAITED", path = "PATH", blocker =
            "BLOCKER"
        static let standard: [Column] = [.type, .pid, .command, .mode, .waited, .path, .blocker]
    }

    func validate() throws {
        _ = try columns()
        if mounts, path != nil || socket != nil || pid != nil || output != nil || outputAll || verbose {
            throw ValidationError(
                "--mounts lists every coordfs mount: it takes no PATH, --socket, -p, -o, --output-all or -v")
        }
    }

    /// The columns asked for (`-o`, `--output-all`), in their order.
    func columns() throws -> [Column] {
        if outputAll { return Column.allCases }
        guard var list = output else { return Column.standard }
        let adding = list.hasPrefix("+")
        if adding { list.removeFirst() }
        let named = try list.split(separator: ",").map { name -> Column in
            guard let column = Column(rawValue: name.trimmingCharacters(in: .whitespaces).uppercased()) else {
                throw ValidationError(
                    "unknown column '\(name)' (the columns: \(Column.allCases.map(\.rawValue).joined(separator: ", ")))"
                )
            }
            return column
        }
        if named.isEmpty { throw ValidationError("-o needs at least one column") }
        return adding ? Column.standard + named.filter { !Column.standard.contains($0) } : named
    }

    /// Only the table's rows (and its headings without -n): nothing a pipeline would take for one.
    private var tableOnly: Bool { noHeadings || raw }

    func run() throws {
        if mounts { return try listMounts() }
        // Listing every server: one that cannot be reached (a mount whose daemon died, a
        // daemon's socket left behind) is named, and the others are still shown.
        var (sockets, unreachable) = try socketsToShow()
        let listing = path == nil && socket == nil
        var shown = 0
        for socketPath in sockets {
            let fields: [String: WireValue]
            do {
                fields = try status(of: socketPath)
            } catch  where listing {
                unreachable.append(error)
                continue
            }
            if shown > 0 && !json && !tableOnly { print("") }
            show(fields)
            shown += 1
        }
        for failure in unreachable.dropFirst(shown == 0 ? 1 : 0) {
            FileHandle.standardError.write(Data("warning: \(failure)\n".utf8))
        }
        if shown == 0, let first = unreachable.first { throw first }
    }

    /// The servers to ask: the one named, else the current directory's mount, else every coordfs
    /// mount and the daemon (as `lslocks` lists every lock), with the mounts whose daemon died.
    private func socketsToShow() throws -> (sockets: [String], gone: [Error]) {
        if let socket { return ([socket], []) }
        if let path {
            let resolved = ServerConnection.resolve(path)
            try MountTable.refuseAbandoned(resolved, named: path)
            try MountTable.refusePrivate(resolved, named: path)
            try MountTable.refuseBacking(resolved, named: path)
            // Outside any mount nothing is held at a path that is not there: a daemon running
            // would only show an empty table.
            if ControlClient.mountSocketPath(for: resolved) == nil && access(resolved, F_OK) != 0 {
                throw CommandFailure("'\(path)': \(Errno.ofFailedCall())")
            }
            guard let socketPath = ControlClient.socketPath(for: resolved) else {
                throw CommandFailure("'\(path)' is not inside a coordfs mount")
            }
            return ([socketPath], [])
        }
        if let here = ControlClient.mountSocketPath(for: FileManager.default.currentDirectoryPath) {
            return ([here], [])
        }
        var sockets: [String] = []
        var gone: [Error] = []
        for mount in MountTable.coordfsMounts(in: MountTable.entries()) {
            if let socket = ControlClient.mountSocketPath(for: mount.mountPoint) {
                sockets.append(socket)
            } else {
                // Never left out unsaid (docs/json.md): a mount that cannot be asked is named, with why.
                gone.append(CommandFailure(Self.whyUnasked(mount.mountPoint)))
            }
        }
        if let daemon = ControlClient.socketPath(for: "/") { sockets.append(daemon) }
        guard !sockets.isEmpty || !gone.isEmpty else { throw CommandFailure("no coordfs mount or daemon runs here") }
        return (sockets, gone)
    }

    /// Why the coordfs mount at `mountPoint` cannot be asked: its daemon has gone, it is another
    /// user's private mount, or its root's socket attribute cannot be read.
    static func whyUnasked(_ mountPoint: String) -> String {
        do { try MountTable.refuseAbandoned(mountPoint) } catch { return "\(error)" }
        if let found = MountTable.privateMount(holding: mountPoint) {
            return MountTable.privateMountReason(found.entry, owner: found.owner)
        }
        return "the coordfs mount at '\(mountPoint)' cannot be asked: its root's user.coordfs.socket cannot be read"
    }

    private func status(of socketPath: String) throws -> [String: WireValue] {
        do {
            let client = try ControlClient(socketPath: socketPath)
            defer { client.close() }
            return try client.wholeStatus()
        } catch {
            throw CommandFailure("\(error)")
        }
    }

    /// The reply narrowed to what `-p` and a path inside the mount ask for: entries of other
    /// processes go, and so do intents (and entries) about other items. The table and `--json`
    /// show the same entries.
    private func narrowed(_ fields: [String: WireValue]) -> [String: WireValue] {
        let root: String? = if case .string(let root)? = fields["root"] { root } else { nil }
        // A path inside a mount shows only what concerns it (the item, and what lies inside it).
        let only = path.map(ServerConnection.resolve).flatMap { $0 == root ? nil : $0 }
        guard only != nil || pid != nil else { return fields }
        func concerns(_ entry: [String: WireValue]) -> Bool {
            guard let only else { return true }
            if case .bool(true)? = entry["hidden"] { return false }
            guard case .string(let item)? = entry["path"] else { return false }
            return item == only || item.hasPrefix(only.hasSuffix("/") ? only : only + "/")
        }
        func narrow(_ fields: [String: WireValue], keys: [String]) -> [String: WireValue] {
            var narrowed = fields
            for key in keys {
                narrowed[key] = .array(
                    array(fields[key]).compactMap { entry -> WireValue? in
                        guard case .object(var object) = entry else { return nil }
                        if let pid, object["pid"] != .int(Int(pid)) { return nil }
                        if object["path"] != nil { return concerns(object) ? entry : nil }
                        let intents = array(object["intents"]).filter {
                            if case .object(let intent) = $0 { concerns(intent) } else { false }
                        }
                        if intents.isEmpty { return nil }
                        object["intents"] = .array(intents)
                        return .object(object)
                    })
            }
            return narrowed
        }
        var narrowed = narrow(fields, keys: ["holders", "waiters", "presenters", "services"])
        // Another host's processes are not this host's: a pid names none of them.
        narrowed["hosts"] =
            pid != nil
            ? nil
            : fields["hosts"].map { hosts in
                .array(
                    array(hosts).map { host in
                        guard case .object(let other) = host else { return host }
                        return .object(narrow(other, keys: ["holders", "waiters"]))
                    })
            }
        return narrowed
    }

    private func show(_ reply: [String: WireValue]) {
        var fields = narrowed(reply)
        if json {
            fields["id"] = nil
            fields["ok"] = nil
            print(String(decoding: WireCodec.encode(object: fields).dropLast(), as: UTF8.self))
            return
        }
        let root: String? = if case .string(let root)? = fields["root"] { root } else { nil }
        // A mount names its backing directory too (the daemon's root is "/").
        let backing = root.flatMap { $0 == "/" ? nil : ControlClient.attribute("user.coordfs.backing", of: $0) }
        // -n and -r print the table alone, as lslocks does, for pipelines (`| xargs`).
        if !tableOnly {
            print(
                "\(string(fields["root"])) — control socket \(string(fields["socket"]))"
                    + (backing.map { " — backing \($0)" } ?? ""))
            // A host of a shared store: whether it holds its lease (a lost one refuses everything).
            if case .object(let cluster)? = fields["cluster"] { print(Self.clusterLine(cluster)) }
        }
        if verbose, let root, let stats = Self.statistics(ofMountAt: root) {
            if let transport = Self.transport(stats) { print(transport) }
            if let coordinated = stats["coordinated"] as? Int, let passed = stats["passed_quietly"] as? Int {
                let beside = stats["passed_beside_open_files"] as? Int ?? 0
                print(
                    "coordinated: \(coordinated) requests, \(passed) of them passed the quiet gates "
                        + "(\(passed - beside) with nothing held, \(beside) beside files held open by other names)")
            }
        }
        let columns = (try? self.columns()) ?? Column.standard
        var rows: [[Column: String]] = []
        func add(_ type: String, _ entries: WireValue?) {
            for entry in array(entries) {
                guard case .object(let object) = entry else { continue }
                let processID: Int? = if case .int(let n)? = object["pid"] { n } else { nil }
                let command = string(object["command"], fallback: string(object["identity"]))
                let blocker = array(object["waits_for"]).map { Self.blocker(string($0)) }.joined(separator: ",")
                let waited: String =
                    if case .int(let ms)? = object["waited_ms"] { String(format: "%.1fs", Double(ms) / 1000) } else {
                        "-"
                    }
                // A path the server keeps from this user: in a directory they cannot read.
                func path(_ fields: [String: WireValue]) -> String? {
                    if case .bool(true)? = fields["hidden"] { return "(in a directory you cannot read)" }
                    return fields["path"].map { string($0) }
                }
                var row: [Column: String] = [
                    .type: type, .pid: processID.map(String.init) ?? "-", .command: command,
                    .waited: waited, .blocker: blocker
                ]
                if let item = path(object) { rows.append(row.merging([.mode: "-", .path: item]) { $1 }) }
                for intent in array(object["intents"]) {
                    guard case .object(let fields) = intent else { continue }
                    let item = path(fields) ?? ""
                    row[.mode] = string(fields["mode"])
                    row[.path] = item
                    rows.append(row)
                }
            }
        }
        add("HOLD", fields["holders"])
        add("WAIT", fields["waiters"])
        add("PRESENT", fields["presenters"])
        // The other hosts of a shared store: their holders and waiters, at this mount's paths.
        for host in array(fields["hosts"]) {
            guard case .object(let other) = host else { continue }
            let name = string(other["host"])
            add("HOLD@" + name, other["holders"])
            add("WAIT@" + name, other["waiters"])
        }
        // Entries the server left out to keep its reply readable: said, never silently.
        if case .object(let omitted)? = fields["omitted"] {
            let counts = ["holders", "waiters", "presenters", "services"].compactMap { list -> String? in
                guard case .int(let count)? = omitted[list] else { return nil }
                return "\(count) \(list)"
            }
            FileHandle.standardError.write(
                Data("warning: the server left out \(counts.joined(separator: ", ")) (too many to send)\n".utf8))
        }
        var table = rows.map { row in columns.map { row[$0] ?? "" } }
        if !noHeadings { table.insert(columns.map(\.rawValue), at: 0) }
        if raw {
            for row in table { print(row.map(Self.rawValue).joined(separator: " ")) }
            return
        }
        let widths = columns.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
        for row in table {
            print(
                row.enumerated().map { $0.element.padding(toLength: widths[$0.offset], withPad: " ", startingAt: 0) }
                    .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// Whom an entry waits for, as lslocks's BLOCKER: the pid of a process's coordinator, else
    /// the coordinator's name.
    static func blocker(_ identity: String) -> String {
        guard identity.hasPrefix("pid:") else { return identity }
        return String(identity.dropFirst(4).prefix { $0 != "#" })
    }

    /// A value of `--raw` output: blanks and backslashes written as \x20 and \x5c, as lslocks does.
    static func rawValue(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case " ": out += "\\x20"
            case "\\": out += "\\x5c"
            case "\t": out += "\\x09"
            case "\n": out += "\\x0a"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out.isEmpty ? "-" : out
    }

    /// A host of a shared store's standing (a status reply's `cluster`) in one line.
    static func clusterLine(_ cluster: [String: WireValue]) -> String {
        func text(_ key: String) -> String { if case .string(let value)? = cluster[key] { value } else { "" } }
        func count(_ key: String) -> Int { if case .int(let value)? = cluster[key] { value } else { 0 } }
        func seconds(_ key: String) -> String? {
            if case .int(let milliseconds)? = cluster[key] {
                String(format: "%.1f s", Double(milliseconds) / 1000)
            } else {
                nil
            }
        }
        let lost = seconds("lost_ms").map { " \($0) ago" } ?? ""
        var line = "cluster: host \(text("host")) of the store '\(text("store"))': "
        switch text("lease") {
        case "held":
            line += "lease held" + (seconds("valid_ms").map { " (valid \($0) more unless renewed)" } ?? "")
        case "lost":
            line +=
                "LEASE LOST\(lost): nothing is granted (ENOLCK), and writes through open files are refused (EIO), until it joins again"
        case "rejoining":
            line +=
                "joining again (lease lost\(lost)): asking again for what its programs hold, before it grants anything new"
        case "alone":
            line +=
                "LEASE LOST\(lost): coordinating its own programs ALONE (--cluster-unreachable local), not with the other hosts"
        case let other:
            line += other
        }
        let leasesLost = count("leases_lost"), fenced = count("fenced_opens")
        if leasesLost > 0 || fenced > 0 {
            line +=
                "; since it joined, \(leasesLost) lease(s) lost, \(fenced) open file(s) fenced (their writes refused)"
        }
        return line
    }

    /// The counters of the mount at `root` (its `user.coordfs.stats`); nil when `root` is not a
    /// mount's root (the daemon's "/").
    static func statistics(ofMountAt root: String) -> [String: Any]? {
        guard let text = ControlClient.attribute("user.coordfs.stats", of: root) else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
    }

    /// How the kernel's requests reach a mount, from its counters.
    static func transport(_ stats: [String: Any]) -> String? {
        guard let queues = stats["ring_queues"] as? Int else { return nil }
        let nice = stats["serve_nice"] as? Int ?? 0
        if queues > 0 {
            let lanes = stats["ring_lanes_all"] as? Int == 1 ? ", every request on lane threads" : ""
            return "requests: FUSE over io_uring, \(queues) queues at nice \(nice)\(lanes)"
        }
        return "requests: /dev/fuse, workers at nice \(nice)"
            + (Mount.ioUringSwitchedOff
                ? " (this kernel has FUSE over io_uring switched off: echo Y > \(Mount.ioUringSwitch))" : "")
    }

    private func string(_ value: WireValue?, fallback: String = "-") -> String {
        if case .string(let text)? = value { return text }
        return fallback
    }

    private func array(_ value: WireValue?) -> [WireValue] {
        if case .array(let values)? = value { return values }
        return []
    }
}
