import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs watch PATH...`: present items from the command line and print what happens to them.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Present PATHs and print coordination events as they come, like inotifywait -m.",
        discussion: """
        Each line is: PATH EVENTS[,...] [NAME] [cookie=N]. Requests (REQUEST in EVENTS) hold up \
        the access until answered: --answer ok consents, --answer EACCES (any errno name) makes \
        it fail with that errno, --answer none never answers (the access then waits for the \
        mount's presenter timeout).
        """
    )

    @Argument(help: "Items to present (inside a coordfs mount, or anywhere with the daemon).")
    var paths: [String]

    @Flag(help: "One JSON object per line.")
    var json = false

    @Option(help: "How to answer requests: ok, an errno name (EACCES, ...), or none.")
    var answer: String = "ok"

    @Option(help: "Comma-separated events to receive (default ALL): RELINQUISH_READER, SAVE, CHANGED, ...")
    var events: String = "ALL"

    @Option(help: "The control socket (default: found from the paths).")
    var socket: String?

    func validate() throws {
        if answer != "ok" && answer != "none" && ErrnoNames.code(of: answer) == nil {
            throw ValidationError("--answer must be ok, none or an errno name such as EACCES")
        }
        if EventMask(names: events.split(separator: ",").map(String.init)) == nil {
            throw ValidationError("unknown event name in --events")
        }
    }

    func run() throws {
        Signals.resetInherited()
        let mask = EventMask(names: events.split(separator: ",").map(String.init))!
        let code: Int32? = answer == "none" ? nil : answer == "ok" ? 0 : ErrnoNames.code(of: answer)
        let printer = Printer(json: json)
        var clients: [String: ControlClient] = [:]
        let ended = DispatchSemaphore(value: 0)
        for path in paths {
            let resolved = ServerConnection.resolve(path)
            let socketPath = try ServerConnection.socket(for: resolved, explicit: socket)
            let client: ControlClient
            if let existing = clients[socketPath] {
                client = existing
            } else {
                client = try connect(socketPath)
                clients[socketPath] = client
                client.onEvent { record in
                    // Answered before printed: the access waits on the answer, not on our output.
                    if record.mask.contains(.request), let code { client.answer(cookie: record.cookie, errno: code) }
                    printer.print(record)
                }
                client.onEnd { ended.signal() }
            }
            do {
                _ = try client.request { .watch(id: $0, path: resolved, mask: mask) }
            } catch {
                throw CommandFailure("cannot watch '\(path)': \(error)")
            }
        }
        printer.note("Watches established.")
        ended.wait()
        throw CommandFailure("the coordination server went away")
    }

    private func connect(_ path: String) throws -> ControlClient {
        do { return try ControlClient(socketPath: path) } catch { throw CommandFailure("\(error)") }
    }
}

/// Prints records one a line, from any thread.
final class Printer: @unchecked Sendable {
    let json: Bool
    private let lock = NSLock()
    init(json: Bool) { self.json = json }

    func print(_ record: EventRecord) {
        let line: String
        if json {
            line = String(decoding: WireCodec.encode(.event(record)).dropLast(), as: UTF8.self)
        } else {
            let base = record.name.isEmpty ? record.path : String(record.path.dropLast(record.name.count + 1))
            var text = "\(base) \(record.mask.names.joined(separator: ","))"
            if !record.name.isEmpty { text += " \(record.name)" }
            if record.cookie != 0 { text += " cookie=\(record.cookie)" }
            line = text
        }
        lock.lock()
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
        lock.unlock()
    }

    func note(_ text: String) {
        if !json { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }
}
