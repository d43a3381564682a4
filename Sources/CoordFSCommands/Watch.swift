import ArgumentParser
import Coordination
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
        Each line is: PATH EVENTS[,...] [NAME] [cookie=N] [pid=N command=NAME] [purpose=ID] via=ROUTE \
        (who made the access: through the mount, a coordinator, or from outside the mount), or what \
        --format makes of it. \
        Requests (REQUEST in EVENTS) hold up the access until answered: --answer ok consents, \
        --answer EACCES (any errno name) makes it fail with that errno, --answer none never \
        answers (the access then waits for the mount's presenter timeout). Exits 2 when \
        --timeout passes with no event, as inotifywait does.
        """
    )

    @Argument(help: "Items to present (inside a coordfs mount, or anywhere with the daemon).")
    var paths: [String]

    @Flag(help: "One JSON object per line.")
    var json = false

    @Option(help: "How to answer requests: ok, an errno name (EACCES, ...), or none.")
    var answer: String = "ok"

    @Option(name: [.customShort("e"), .long],
            help: "Comma-separated events to receive, in either case (default ALL): RELINQUISH_READER, SAVE, CHANGED, ...")
    var events: String = "ALL"

    @Option(help: ArgumentHelp("Print each event as FMT, as inotifywait --format: %w the watched item, %f the name inside it, %e the events (comma-separated), %c the cookie, %T the time (--timefmt), %% a percent sign; %p, %C and %o the pid, command and route (mount, coordinator, outside) of whoever made the access.", valueName: "FMT"))
    var format: String?

    @Option(help: ArgumentHelp("The strftime(3) format of %T (default %H:%M:%S).", valueName: "FMT"))
    var timefmt: String = "%H:%M:%S"

    @Flag(name: [.customShort("q"), .long], help: "Print no line but events (no \"Watches established.\").")
    var quiet = false

    @Option(name: [.customShort("t"), .long], help: "End with status 2 when this many seconds pass with no event (as inotifywait -t; 0: never).")
    var timeout: Double?

    @Option(help: "The control socket (default: found from the paths).")
    var socket: String?

    @Flag(name: [.customShort("m"), .long], help: "Keep printing events (the default; accepted as inotifywait takes it).")
    var monitor = false

    @Flag(help: "Print each event as CSV, as inotifywait --csv: the watched item, the events, the name inside it.")
    var csv = false

    @Option(help: ArgumentHelp("Print no event whose full path matches this extended regular expression (as inotifywait --exclude; requests are still answered).", valueName: "REGEX"))
    var exclude: String?

    @Option(help: ArgumentHelp("--exclude, ignoring case.", valueName: "REGEX"))
    var excludei: String?

    @Option(help: ArgumentHelp("Print only events whose full path matches this extended regular expression (as inotifywait --include).", valueName: "REGEX"))
    var include: String?

    @Option(help: ArgumentHelp("--include, ignoring case.", valueName: "REGEX"))
    var includei: String?

    /// What --exclude and --include keep, from their expressions.
    struct PathFilter: @unchecked Sendable {   // NSRegularExpression is immutable, and documented thread-safe
        let exclude: [NSRegularExpression]
        let include: [NSRegularExpression]

        func keeps(_ path: String) -> Bool {
            let range = NSRange(path.startIndex..., in: path)
            if exclude.contains(where: { $0.firstMatch(in: path, range: range) != nil }) { return false }
            return include.isEmpty || include.contains { $0.firstMatch(in: path, range: range) != nil }
        }
    }

    func pathFilter() throws -> PathFilter {
        func compile(_ pattern: String?, _ name: String, ignoringCase: Bool) throws -> [NSRegularExpression] {
            guard let pattern else { return [] }
            do { return [try NSRegularExpression(pattern: pattern, options: ignoringCase ? [.caseInsensitive] : [])] } catch {
                throw ValidationError("--\(name): '\(pattern)' is not a regular expression")
            }
        }
        return PathFilter(exclude: try compile(exclude, "exclude", ignoringCase: false) + compile(excludei, "excludei", ignoringCase: true),
                          include: try compile(include, "include", ignoringCase: false) + compile(includei, "includei", ignoringCase: true))
    }

    func validate() throws {
        if answer != "ok" && answer != "none" && ErrnoNames.code(of: answer) == nil {
            throw ValidationError("--answer must be ok, none or an errno name such as EACCES")
        }
        if EventMask(names: events.split(separator: ",").map { $0.uppercased() }) == nil {
            throw ValidationError("unknown event name in --events")
        }
        if let timeout, case .failure(let why) = Seconds.duration(timeout) { throw ValidationError("--timeout: \(why)") }
        if [json, format != nil, csv].filter({ $0 }).count > 1 { throw ValidationError("--json, --csv and --format do not go together") }
        _ = try pathFilter()
    }

    func run() throws {
        Signals.resetInherited()
        let mask = EventMask(names: events.split(separator: ",").map { $0.uppercased() })!
        let code: Int32? = answer == "none" ? nil : answer == "ok" ? 0 : ErrnoNames.code(of: answer)
        let printer = Printer(json: json, format: format.map { EventFormat($0, timeFormat: timefmt) } ?? (csv ? EventFormat.csv : nil),
                              quiet: quiet)
        let filter = try pathFilter()
        var clients: [String: ControlClient] = [:]
        let ended = DispatchSemaphore(value: 0)
        let heard = DispatchSemaphore(value: 0)
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
                    if filter.keeps(record.path) { printer.print(record) }
                    heard.signal()
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
        let quiet = QuietFlag()
        if let timeout, timeout > 0 {
            // Each event starts the wait again; a quiet stretch of `timeout` ends the watch.
            let quietFor = DispatchTimeInterval.nanoseconds(Int(timeout * 1e9))
            Thread {
                while heard.wait(timeout: .now() + quietFor) == .success {}
                quiet.set()
                ended.signal()
            }.start()
        }
        ended.wait()
        if quiet.isSet { throw ExitCode(2) }
        // The watch ends with the first server that goes.
        if let gone = clients.values.first(where: { $0.isClosed }) { throw ServerConnection.closed(gone) }
        throw CommandFailure("a coordination server closed the connection")
    }

    private func connect(_ path: String) throws -> ControlClient {
        do { return try ControlClient(socketPath: path) } catch { throw CommandFailure("\(error)") }
    }
}

// @unchecked Sendable: each line is written whole under `lock`.
/// Prints records one a line, from any thread.
final class Printer: @unchecked Sendable {
    let json: Bool
    let format: EventFormat?
    let quiet: Bool
    private let lock = NSLock()
    init(json: Bool, format: EventFormat? = nil, quiet: Bool = false) {
        self.json = json
        self.format = format
        self.quiet = quiet
    }

    /// Written as bytes, one write(2) a line: a watcher prints a line for every event, and
    /// building a `String`, then `Data`, for `FileHandle` was a third of what it spent on one.
    func print(_ record: EventRecord) {
        var line: [UInt8]
        if json {
            line = WireCodec.encode(.event(record))
        } else if let format {
            line = format.line(for: record)
        } else {
            let path = FileSystemName.bytes(record.path), name = FileSystemName.bytes(record.name)
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
            if let origin = record.origin {
                // Who made the access, after what inotifywait's users parse.
                if let pid = origin.pid { line += " pid=\(pid)".utf8 }
                if let command = origin.command { line += " command=".utf8; line += Self.word(command) }
                if let purpose = origin.purpose { line += " purpose=".utf8; line += Self.word(purpose) }
                line += " via=\(origin.via)".utf8
            }
            line.append(UInt8(ascii: "\n"))
        }
        lock.withLock { Self.writeAll(STDOUT_FILENO, line) }
    }

    /// A value as one word of the line: blanks and control characters become "_".
    private static func word(_ text: String) -> [UInt8] {
        text.utf8.map { $0 <= 0x20 || $0 == 0x7f ? UInt8(ascii: "_") : $0 }
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
        if !json && !quiet { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }
}

/// inotifywait's `--format`: %w the watched item, %f the name inside it (empty for the item
/// itself), %e the events, %c the cookie, %T the time by a strftime(3) format, %% a percent;
/// and coordfs's own: %p the pid, %C the command and %o the route (mount, coordinator,
/// outside) of whoever made the access.
/// (%w is the watched directory with a trailing slash for an event inside it, as inotifywait
/// prints it, so that %w%f is the whole path.)
struct EventFormat: Sendable {
    let pattern: [UInt8]
    let timeFormat: String

    /// Each field a CSV value (`--csv`): quoted where it holds a comma, a quote or a line break.
    let quotesFields: Bool

    init(_ pattern: String, timeFormat: String, quotesFields: Bool = false) {
        self.pattern = Array(pattern.utf8)
        self.timeFormat = timeFormat
        self.quotesFields = quotesFields
    }

    /// inotifywait --csv's line: the watched item, the events, the name inside it.
    static let csv = EventFormat("%w,%e,%f", timeFormat: "%H:%M:%S", quotesFields: true)

    private func field(_ bytes: [UInt8]) -> [UInt8] {
        guard quotesFields, bytes.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 10 || $0 == 13 }) else {
            return bytes
        }
        var quoted: [UInt8] = [UInt8(ascii: "\"")]
        for byte in bytes {
            if byte == UInt8(ascii: "\"") { quoted.append(byte) }
            quoted.append(byte)
        }
        quoted.append(UInt8(ascii: "\""))
        return quoted
    }

    func line(for record: EventRecord) -> [UInt8] {
        let path = FileSystemName.bytes(record.path), name = FileSystemName.bytes(record.name)
        var watched = path
        if !name.isEmpty, path.count > name.count, path.suffix(name.count).elementsEqual(name) {
            watched = Array(path.prefix(path.count - name.count))       // with its trailing "/"
        }
        var line: [UInt8] = []
        var index = 0
        while index < pattern.count {
            let byte = pattern[index]
            guard byte == UInt8(ascii: "%"), index + 1 < pattern.count else { line.append(byte); index += 1; continue }
            switch pattern[index + 1] {
            case UInt8(ascii: "w"): line += field(watched)
            case UInt8(ascii: "f"): line += field(name)
            case UInt8(ascii: "e"): line += field(Array(record.mask.names.joined(separator: ",").utf8))
            case UInt8(ascii: "c"): line += String(record.cookie).utf8
            case UInt8(ascii: "T"): line += Self.now(timeFormat).utf8
            case UInt8(ascii: "p"): line += (record.origin?.pid.map(String.init) ?? "").utf8
            case UInt8(ascii: "C"): line += (record.origin?.command ?? "").utf8
            case UInt8(ascii: "o"): line += (record.origin?.via ?? "").utf8
            case UInt8(ascii: "%"): line.append(UInt8(ascii: "%"))
            default: line += pattern[index...index + 1]
            }
            index += 2
        }
        line.append(UInt8(ascii: "\n"))
        return line
    }

    static func now(_ format: String) -> String {
        var seconds = time(nil)
        var parts = tm()
        localtime_r(&seconds, &parts)
        var buffer = [CChar](repeating: 0, count: 256)
        let count = strftime(&buffer, buffer.count, format, &parts)
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

// @unchecked Sendable: its value is behind its lock.
/// Set once by the timeout's thread, read by the main one.
private final class QuietFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
