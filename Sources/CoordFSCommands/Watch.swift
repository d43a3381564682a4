import ArgumentParser
import Coordination
import CoordinationRuntime
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
        (PATH as given, or with -r the directory inside it that holds NAME; who made the access: \
        through the mount, a coordinator, or from outside the mount), or what --format makes of it. \
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
            help: "Comma-separated events to receive, in either case (default ALL): RELINQUISH_READER, SAVE, CHANGED, ...; inotify's create, modify, move, moved_from, moved_to, move_self, delete and delete_self stand for the events that tell the same.")
    var events: String = "ALL"

    @Flag(name: [.customShort("r"), .long], help: "Print events of items at any depth inside a watched directory, as inotifywait -r (without it, only of the directory's own entries; requests about deeper items are answered all the same).")
    var recursive = false

    @Flag(help: "Name events as inotifywait does (CREATE, MODIFY, MOVED_FROM, MOVED_TO, MOVE_SELF, DELETE, DELETE_SELF, with ISDIR for directories), and print only those: a script written for inotifywait reads the same lines.")
    var inotifyEvents = false

    /// The events `-e` asks for, inotify's names among them.
    func eventMask() -> EventMask? {
        let names = events.split(separator: ",").flatMap { name -> [String] in
            let upper = name.uppercased()
            return EventView.inotifyAliases[upper] ?? [upper]
        }
        return EventMask(names: names)
    }

    @Option(help: ArgumentHelp("Print each event as FMT, as inotifywait --format: %w the watched item, %f the name inside it, %e the events (comma-separated), %c the cookie, %T the time (--timefmt), %% a percent sign; %p, %C and %o the pid, command and route (mount, coordinator, outside, cluster) of whoever made the access, %h the other host for cluster.", valueName: "FMT"))
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
        if eventMask() == nil {
            throw ValidationError("unknown event name in --events")
        }
        if let timeout, case .failure(let why) = Seconds.duration(timeout) { throw ValidationError("--timeout: \(why)") }
        if [json, format != nil, csv].filter({ $0 }).count > 1 { throw ValidationError("--json, --csv and --format do not go together") }
        _ = try pathFilter()
    }

    func run() throws {
        Signals.resetInherited()
        let mask = eventMask()!
        let code: Int32? = answer == "none" ? nil : answer == "ok" ? 0 : ErrnoNames.code(of: answer)
        let given = Dictionary(paths.map { (ServerConnection.resolve($0), $0) }) { first, _ in first }
        let printer = Printer(json: json, format: format.map { EventFormat($0, timeFormat: timefmt) } ?? (csv ? EventFormat.csv : nil),
                              quiet: quiet, view: EventView(given: given, recursive: recursive, inotifyNames: inotifyEvents))
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

// @unchecked Sendable: its value is behind its lock.
/// Set once by the timeout's thread, read by the main one.
private final class QuietFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
