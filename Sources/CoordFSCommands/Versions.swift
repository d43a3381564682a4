import ArgumentParser
import CoordinationClient
import CoordinationRuntime
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs versions PATH`: what a mount kept of an item's earlier contents, and putting one back.
struct Versions: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the versions a mount kept of an item, show one, or put one back.",
        discussion: """
            A mount keeps a file's content as a version before a rename over it, the removal of its \
            last name, or its truncation. A version kept because its content was replaced by a writer \
            that had not seen it (a lost update) is a conflict until it is resolved. Each line lists \
            a version: ID, when it was kept, SIZE, what happened to it, who did it, and conflict, \
            resolved or kept where so. Exit status: 0; 1 with the reason on standard error; 64 for a \
            command line it cannot take.
            """
    )

    @Argument(help: "An item inside a coordfs mount; it may have been removed since.", completion: .file())
    var path: String

    @Option(
        name: .customLong("show"), help: ArgumentHelp("Write version ID's content to standard output.", valueName: "id")
    )
    var show: String?

    @Option(
        help: ArgumentHelp(
            "Put version ID back at PATH, as a program saving it would (the content there now is kept as a version in turn).",
            valueName: "id"))
    var restore: String?

    @Option(
        help: ArgumentHelp(
            "Mark conflict version ID resolved: the bounds may then take it like any other.", valueName: "id"))
    var resolve: String?

    @Option(help: ArgumentHelp("Keep version ID whatever the bounds say, until --unkeep or --remove.", valueName: "id"))
    var keep: String?

    @Option(help: ArgumentHelp("Let the bounds take version ID again.", valueName: "id"))
    var unkeep: String?

    @Option(help: ArgumentHelp("Remove version ID.", valueName: "id"))
    var remove: String?

    @Flag(help: "Print the versions as one JSON object (docs/json.md).")
    var json = false

    @Option(help: "The control socket (default: found from the path).")
    var socket: String?

    func validate() throws {
        let actions = [show, restore, resolve, keep, unkeep, remove].compactMap { $0 }
        if actions.count > 1 {
            throw ValidationError("give one of --show, --restore, --resolve, --keep, --unkeep and --remove")
        }
    }

    func run() throws {
        let resolved = ServerConnection.resolve(path)
        // A removed item has no socket attribute of its own: its directory's mount serves it.
        let client = try ServerConnection.connect(for: resolved, explicit: socket)
        defer { client.close() }
        func act(_ version: String, _ action: VersionAction) throws {
            do { try client.request { .version(id: $0, path: resolved, version: version, action: action) } } catch {
                throw CommandFailure("\(error)")
            }
        }
        if let show {
            let (_, content) = try open(show, client, resolved)
            FileHandle.standardOutput.write(content.readDataToEndOfFile())
        } else if let restore {
            let (_, content) = try open(restore, client, resolved)
            do { try VersionsLink.put(content, at: resolved) } catch { throw CommandFailure("\(error)") }
        } else if let resolve {
            try act(resolve, .resolve)
        } else if let keep {
            try act(keep, .pin)
        } else if let unkeep {
            try act(unkeep, .unpin)
        } else if let remove {
            try act(remove, .remove)
        } else {
            let fields: [String: WireValue]
            do { fields = try client.request { .versions(id: $0, path: resolved) } } catch {
                throw CommandFailure("\(error)")
            }
            list(fields)
        }
    }

    private func open(
        _ version: String, _ client: ControlClient, _ path: String
    ) throws -> ([String: WireValue], FileHandle) {
        do { return try client.openVersion(version, of: path) } catch { throw CommandFailure("\(error)") }
    }

    private func list(_ fields: [String: WireValue]) {
        if json {
            print(
                String(
                    decoding: WireCodec.encode(object: fields.filter { $0.key != "id" && $0.key != "ok" }).dropLast(),
                    as: UTF8.self))
            return
        }
        guard case .array(let versions)? = fields["versions"], !versions.isEmpty else {
            FileHandle.standardError.write(Data("no versions of \(path)\n".utf8))
            return
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        for case .object(let version) in versions {
            func text(_ key: String) -> String { if case .string(let value)? = version[key] { value } else { "" } }
            func number(_ key: String) -> Int { if case .int(let value)? = version[key] { value } else { 0 } }
            func flag(_ key: String) -> Bool { if case .bool(true)? = version[key] { true } else { false } }
            var by = "-"
            if case .object(let origin)? = version["replaced_by"] {
                let pid: String = if case .int(let pid)? = origin["pid"] { "pid \(pid)" } else { "" }
                let command: String = if case .string(let command)? = origin["command"] { " (\(command))" } else { "" }
                by = pid + command
            }
            var marks: [String] = []
            if flag("conflict") { marks.append(flag("resolved") ? "resolved" : "conflict") }
            if flag("pinned") { marks.append("kept") }
            let time = formatter.string(from: Date(timeIntervalSince1970: Double(number("time"))))
            print(
                [text("id"), time, String(number("size")), text("cause"), by, marks.joined(separator: ",")]
                    .filter { !$0.isEmpty }.joined(separator: "  "))
        }
    }
}
