import ArgumentParser
import Coordination
import CoordinationRuntime
import CoordinationClient
import CoordinationWire
import Foundation
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs watch PATH...`: present items from the command line and print what happens to them.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Present PATHs and print coordination events as they come, like inotifywait -m; with --inotify-events, as inotifywait.",
        discussion: """
            Each line is: PATH EVENTS[,...] [NAME] [cookie=N] [pid=N command=NAME] [purpose=ID] via=ROUTE \
            (PATH as given, or with -r the directory inside it that holds NAME; who made the access: \
            through the mount, a coordinator, or from outside the mount), or what --format makes of it. \
            Requests (REQUEST in EVENTS) hold up the access until answered: --answer ok consents, \
            --answer EACCES (any errno name) makes it fail with that errno, --answer none never \
            answers (the access then waits for the mount's presenter timeout). With \
            --inotify-events each line is inotifywait's, `DIR/ EVENTS NAME`, and as inotifywait the \
            first event ends the watch unless -m is given, and a path that does not exist is refused. \
            Exit status, as inotifywait's: 0 once every watched item is deleted, or after the first \
            event with --inotify-events and no -m; 1 when a path cannot be watched, its server ends, \
            or (with --inotify-events, no -m) the watched item went unasked for, with the reason on \
            standard error; 2 when --timeout passes with no event; 64 for a command line it cannot \
            take. SIGINT and SIGTERM end it as they end any program.
            """
    )

    @Argument(help: "Items to present (inside a coordfs mount, or anywhere with the daemon).", completion: .file())
    var paths: [String]

    @Flag(help: "One JSON object per line.")
    var json = false

    @Option(
        help: "How to answer requests: ok, an errno name (EACCES, ...), or none.",
        completion: .list(["ok", "none", "EACCES", "EPERM", "EBUSY", "EAGAIN", "EIO"]))
    var answer: String = "ok"

    @Option(
        name: [.customShort("e"), .customLong("events"), .customLong("event")],
        help: ArgumentHelp(
            "Events to receive, comma-separated or repeated, in either case (default: all): RELINQUISH_READER, SAVE, CHANGED, ...; or inotifywait's create, modify, attrib, close_write, close, moved_from, moved_to, move, move_self, delete, delete_self, unmount, ignored, which stand for the events that tell the same (access, open and close_nowrite are never told, and refused).",
            valueName: "EVENTS"),
        completion: .list(Self.eventNames))
    var events: [String] = []

    @Flag(
        name: [.customShort("r"), .long],
        help:
            "Print events of items at any depth inside a watched directory, as inotifywait -r (without it, only of the directory's own entries; requests about deeper items are answered all the same)."
    )
    var recursive = false

    @Flag(
        help:
            "Print as inotifywait does: `DIR/ EVENTS NAME` (or --format, --csv), with inotify's names (CREATE, MODIFY, ATTRIB, CLOSE_WRITE,CLOSE, MOVED_FROM, MOVED_TO, MOVE_SELF, DELETE, DELETE_SELF, IGNORED, UNMOUNT, with ISDIR for directories), only those, and the first event alone unless -m is given: a script written for inotifywait reads the same lines."
    )
    var inotifyEvents = false

    /// What `--answer` says, in either case (as event names are taken): ok is errno 0, none
    /// never answers.
    enum AnswerCode: Equatable { case errno(Int32), none, invalid }

    var answerCode: AnswerCode {
        switch answer.lowercased() {
        case "ok": return .errno(0)
        case "none": return .none
        default: return ErrnoNames.code(of: answer.uppercased()).map { .errno($0) } ?? .invalid
        }
    }

    /// The names `-e` completes: the events a watch can hear (not the record flags), and
    /// inotifywait's that stand for them.
    static var eventNames: [String] {
        EventMask.names.map(\.0).filter { !["REQUEST", "METADATA_ONLY", "SERVICE_CONNECTION"].contains($0) }
            + InotifyEvents.names.map(\.0).filter { InotifyEvents.untold[$0] == nil }
    }

    /// What `-e` asks for.
    func eventChoice() throws(ValidationError) -> EventChoice {
        try EventChoice(events, inotifyNames: inotifyEvents)
    }

    @Option(
        help: ArgumentHelp(
            "Print each event as FMT, as inotifywait --format: %w the watched item, %f the name inside it, %e the events (comma-separated; %Xe: separated by X), %c the cookie, %T the time (--timefmt), %% a percent sign; %p, %C and %o the pid, command and route (mount, coordinator, outside, cluster) of whoever made the access, %h the other host for cluster.",
            valueName: "FMT"))
    var format: String?

    @Option(help: ArgumentHelp("The strftime(3) format of %T (default %H:%M:%S).", valueName: "FMT"))
    var timefmt: String = "%H:%M:%S"

    @Flag(name: [.customShort("q"), .long], help: "Print no line but events (no \"Watches established.\").")
    var quiet = false

    @Option(
        name: [.customShort("t"), .long],
        help: "End with status 2 when this many seconds pass with no event (as inotifywait -t; 0: never).")
    var timeout: Double?

    @Option(help: "The control socket (default: found from the paths).", completion: .file())
    var socket: String?

    @Flag(
        name: [.customShort("m"), .long],
        help:
            "With --inotify-events, keep printing events (as inotifywait -m; without it the first event ends the watch). coordfs's own lines always keep coming."
    )
    var monitor = false

    @Flag(
        name: [.customShort("c"), .long],
        help: "Print each event as CSV, as inotifywait -c/--csv: the watched item, the events, the name inside it.")
    var csv = false

    @Option(
        help: ArgumentHelp(
            "Print no event whose full path matches this extended regular expression (as inotifywait --exclude; requests are still answered).",
            valueName: "REGEX"))
    var exclude: String?

    @Option(help: ArgumentHelp("--exclude, ignoring case.", valueName: "REGEX"))
    var excludei: String?

    @Option(
        help: ArgumentHelp(
            "Print only events whose full path matches this extended regular expression (as inotifywait --include).",
            valueName: "REGEX"))
    var include: String?

    @Option(help: ArgumentHelp("--include, ignoring case.", valueName: "REGEX"))
    var includei: String?

    /// What --exclude and --include keep, from their expressions.
    struct PathFilter: @unchecked Sendable {  // NSRegularExpression is immutable, and documented thread-safe
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
            do {
                return [try NSRegularExpression(pattern: pattern, options: ignoringCase ? [.caseInsensitive] : [])]
            } catch {
                throw ValidationError("--\(name): '\(pattern)' is not a regular expression")
            }
        }
        return PathFilter(
            exclude: try compile(exclude, "exclude", ignoringCase: false)
                + compile(excludei, "excludei", ignoringCase: true),
            include: try compile(include, "include", ignoringCase: false)
                + compile(includei, "includei", ignoringCase: true))
    }

    func validate() throws {
        if answerCode == .invalid {
            throw ValidationError("--answer must be ok, none or an errno name such as EACCES, not '\(answer)'")
        }
        _ = try eventChoice()
        if let timeout, case .failure(let why) = Seconds.duration(timeout) {
            throw ValidationError("--timeout: \(why)")
        }
        if [json, format != nil, csv].filter({ $0 }).count > 1 {
            throw ValidationError("--json, --csv and --format do not go together")
        }
        _ = try pathFilter()
    }

    func run() throws {
        Signals.resetInherited()
        let choice = try eventChoice()
        let code: Int32? = if case .errno(let code) = answerCode { code } else { nil }
        // As inotifywait: a path that is not there fails the whole watch, in its words.
        for path in paths where inotifyEvents {
            guard let failure = Self.missing(path) else { continue }
            FileHandle.standardError.write(Data("Couldn't watch \(path): \(failure)\n".utf8))
            throw ExitCode(1)
        }
        let given = Dictionary(paths.map { (ServerConnection.resolve($0), $0) }) { first, _ in first }
        let oneEvent = inotifyEvents && !monitor
        let shape =
            format.map { EventFormat($0, timeFormat: timefmt) } ?? (csv ? .csv : inotifyEvents ? .inotifywait : nil)
        let printer = Printer(
            json: json, format: shape, quiet: quiet,
            view: EventView(given: given, recursive: recursive, inotifyNames: inotifyEvents, choice: choice),
            limit: oneEvent ? 1 : nil)
        let filter = try pathFilter()
        let end = WatchEnd()
        let live = LiveWatches(count: paths.count)
        var clients: [String: ControlClient] = [:]
        let heard = DispatchSemaphore(value: 0)
        for path in paths {
            let resolved = ServerConnection.resolve(path)
            let socketPath = try ServerConnection.socket(for: resolved, explicit: socket)
            if !inotifyEvents, Self.missing(path) != nil {
                printer.note("'\(path)' does not exist: watched as a path (a file made there is told as CHANGED).")
            }
            let client: ControlClient
            if let existing = clients[socketPath] {
                client = existing
            } else {
                client = try connect(socketPath)
                clients[socketPath] = client
                client.onEvent { record in
                    // Answered before printed: the access waits on the answer, not on our output.
                    if record.mask.contains(.request), let code { client.answer(cookie: record.cookie, errno: code) }
                    let printed = filter.keeps(record.path) && printer.print(record)
                    heard.signal()
                    if printed && oneEvent { return end.finish(.event) }
                    if record.mask.contains(.reacquire) { live.reacquired(record.cookie) }
                    if code == 0, choice.asked.contains(.reacquire),
                        !record.mask.isDisjoint(with: [.relinquishToReader, .relinquishToWriter])
                    {
                        live.relinquished(record.cookie)
                    }
                    // A watched item deleted: the server removed its watch (inotify's IGNORED).
                    if record.mask.contains(.presenterRemoved), record.name.isEmpty,
                        live.remove(socketPath, wd: record.wd), oneEvent
                    {
                        return end.finish(.unasked)
                    }
                    // Every watched item gone, nothing more can come: the watch ends, after the
                    // REACQUIRE its deletion's relinquish is still due.
                    if live.isDrained { end.finish(.gone) }
                }
                client.onEnd {
                    // inotify's UNMOUNT: the mount of what is still watched has gone.
                    if case .string(let root)? = client.server["root"], root != "/" {
                        for resolved in live.removeAll(socketPath) {
                            if printer.printUnmounted(resolved) && oneEvent { end.finish(.event) }
                        }
                    }
                    end.finish(.closed)
                }
            }
            do {
                let fields = try client.request { .watch(id: $0, path: resolved, mask: choice.asked) }
                if case .int(let wd)? = fields["wd"] { live.add(socketPath, wd: wd, path: resolved) }
            } catch {
                throw CommandFailure("cannot watch '\(path)': \(error)")
            }
        }
        printer.note("Watches established.")
        if let timeout, timeout > 0 {
            // Each event starts the wait again; a quiet stretch of `timeout` ends the watch.
            let quietFor = DispatchTimeInterval.nanoseconds(Int(timeout * 1e9))
            Thread {
                while heard.wait(timeout: .now() + quietFor) == .success {}
                end.finish(.quiet)
            }.start()
        }
        switch end.wait() {
        case .event, .gone: return
        case .quiet: throw ExitCode(2)
        case .unasked: throw ExitCode(1)
        case .closed:
            // The watch ends with the first server that goes.
            if let gone = clients.values.first(where: { $0.isClosed }) { throw ServerConnection.closed(gone) }
            throw CommandFailure("a coordination server closed the connection")
        }
    }

    /// Why `path` cannot be watched as inotifywait would (strerror's words), or nil: it is there.
    static func missing(_ path: String) -> String? {
        var info = stat()
        return stat(path, &info).failure?.description
    }

    private func connect(_ path: String) throws -> ControlClient {
        do { return try ControlClient(socketPath: path) } catch { throw CommandFailure("\(error)") }
    }
}

// @unchecked Sendable: its reason is behind its lock.
/// How the watch ended: the first reason given, for the main thread that waits for one.
private final class WatchEnd: @unchecked Sendable {
    enum Reason {
        /// Without -m under --inotify-events: the first event was printed.
        case event
        /// Without -m under --inotify-events: a watched item went, an event not asked for.
        case unasked
        /// Every watched item was deleted.
        case gone
        /// --timeout passed with no event.
        case quiet
        /// A server closed the connection.
        case closed
    }

    private let condition = NSCondition()
    private var reason: Reason?

    func finish(_ why: Reason) {
        condition.withLock {
            if reason == nil { reason = why }
            condition.signal()
        }
    }

    func wait() -> Reason {
        condition.withLock {
            while true {
                if let reason { return reason }
                condition.wait()
            }
        }
    }
}

// @unchecked Sendable: its tables are behind its lock.
/// The watches still on, by server and number, and the relinquishes whose REACQUIRE is still
/// due: a watch whose items are all gone ends once those have come.
private final class LiveWatches: @unchecked Sendable {
    private let lock = NSLock()
    private var watches: [String: [Int: String]] = [:]
    private var relinquishes = Set<UInt64>()
    /// The watches to end (one a path given), and those ended with their items.
    private let count: Int
    private var ended = 0

    init(count: Int) { self.count = count }

    func add(_ server: String, wd: Int, path: String) { lock.withLock { watches[server, default: [:]][wd] = path } }

    /// Forgets watch `wd`, ended with its item; whether it was on.
    func remove(_ server: String, wd: Int) -> Bool {
        lock.withLock {
            guard watches[server]?.removeValue(forKey: wd) != nil else { return false }
            ended += 1
            return true
        }
    }

    /// Forgets the watches of `server`; the paths they watched.
    func removeAll(_ server: String) -> [String] {
        lock.withLock { Array((watches.removeValue(forKey: server) ?? [:]).values) }
    }

    func relinquished(_ cookie: UInt64) { lock.withLock { _ = relinquishes.insert(cookie) } }
    func reacquired(_ cookie: UInt64) { lock.withLock { _ = relinquishes.remove(cookie) } }

    /// Whether every watch has ended with its item, and nothing more is due.
    var isDrained: Bool { lock.withLock { ended == count && relinquishes.isEmpty } }
}
