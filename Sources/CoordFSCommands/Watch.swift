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
        // The watch ends with the first server that goes.
        if let gone = clients.values.first(where: { $0.isClosed }) { throw ServerConnection.closed(gone) }
        throw CommandFailure("a coordination server closed the connection")
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

    /// Written as bytes, one write(2) a line: a watcher prints a line for every event, and
    /// building a `String`, then `Data`, for `FileHandle` was a third of what it spent on one.
    func print(_ record: EventRecord) {
        var line: [UInt8]
        if json {
            line = WireCodec.encode(.event(record))
        } else {
            let path = Array(record.path.utf8), name = Array(record.name.utf8)
            line = []
            line.reserveCapacity(path.count + name.count + 64)
            // PATH is the watched item's: the record's path less "/NAME".
            if name.isEmpty {
                line += path
            } else if path.count > name.count, path.suffix(name.count).elementsEqual(name),
                      path[path.count - name.count - 1] == UInt8(ascii: "/") {
                line += path.prefix(path.count - name.count - 1)
            }
            line.append(UInt8(ascii: " "))
            for (index, eventName) in record.mask.names.enumerated() {
                if index > 0 { line.append(UInt8(ascii: ",")) }
                line += eventName.utf8
            }
            if !name.isEmpty { line.append(UInt8(ascii: " ")); line += name }
            if record.cookie != 0 { line += " cookie=\(record.cookie)".utf8 }
            line.append(UInt8(ascii: "\n"))
        }
        lock.withLock { Self.writeAll(STDOUT_FILENO, line) }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            // Any other failure drops the line. (A pipe whose reader left
            // raises SIGPIPE first, which ends the watch as it ends inotifywait.)
            if written <= 0 { return }
            offset += written
        }
    }

    func note(_ text: String) {
        if !json { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }
}
