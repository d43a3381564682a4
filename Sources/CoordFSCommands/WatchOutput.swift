import LinuxSystem
import Coordination
import CoordinationRuntime
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An event as `coordfs watch` shows it in its text forms, as inotifywait would: the directory
/// that holds the item, spelled from the path as the user gave it, the item's name in it (empty
/// for the watched item itself), and the event names. Bytes, since names are.
struct ShownEvent {
    var directory: [UInt8]
    var name: [UInt8]
    var events: [String]
    /// Whether the watched item itself is a directory: its own events' %w ends with "/".
    var itselfIsDirectory = false

    /// inotifywait's %w: the directory that holds the item with its trailing "/", or the
    /// watched item itself (a directory with its "/").
    var watched: [UInt8] {
        let slash = UInt8(ascii: "/")
        guard !name.isEmpty || itselfIsDirectory, directory.last != slash else { return directory }
        return directory + [slash]
    }
}

// @unchecked Sendable: the directories it has seen are behind `lock`; the rest is immutable.
/// Turns records into what the text forms print: paths as given, `-r`'s reach, the events
/// asked for, and with `--inotify-events` inotify's names, ISDIR included.
final class EventView: @unchecked Sendable {
    /// The watched paths as the user gave them, by their resolved form (what records carry):
    /// bytes, as names are.
    private let given: [[UInt8]: [UInt8]]
    let recursive: Bool
    let inotifyNames: Bool
    let choice: EventChoice
    /// The watched items that are directories (resolved), as inotifywait finds them: following
    /// a symbolic link given.
    private let watchedDirectories: Set<[UInt8]>
    private let lock = NSLock()
    /// Directories known inside the watched ones (resolved), for ISDIR on DELETE and MOVED_FROM,
    /// when the item is gone and can no longer be asked.
    private var directories = Set<[UInt8]>()

    init(given: [String: String], recursive: Bool, inotifyNames: Bool, choice: EventChoice? = nil) {
        self.given = Dictionary(given.map { (FileSystemName.bytes($0.key), FileSystemName.bytes($0.value)) }) {
            first, _ in first
        }
        self.recursive = recursive
        self.inotifyNames = inotifyNames
        self.choice = choice ?? .everything(inotifyNames: inotifyNames)
        watchedDirectories = Set(
            self.given.keys.filter { resolved in
                var info = stat()
                return FileSystemName.withCString(resolved, { stat($0, &info) }) == 0
                    && (info.st_mode & S_IFMT) == S_IFDIR
            })
        guard inotifyNames else { return }
        for resolved in self.given.keys { remember(directoriesIn: resolved, depth: recursive ? 64 : 1) }
    }

    /// Whether `record` is within this watch's reach (without `-r`, a watched directory's own
    /// entries, and the directory itself) and among the events it prints.
    func reaches(_ record: EventRecord) -> Bool {
        (recursive || !record.name.utf8.contains(UInt8(ascii: "/"))) && !record.mask.isDisjoint(with: choice.printed)
    }

    /// What to print of `record`, a line each; none for what this watch does not print: an
    /// item deeper than a watched directory's own entries without `-r`, an event not asked for,
    /// and with inotify's names an event inotify has no name for (requests, REACQUIRE, BROKEN).
    func show(_ record: EventRecord) -> [ShownEvent] {
        let path = FileSystemName.bytes(record.path), relative = FileSystemName.bytes(record.name)
        guard recursive || !relative.contains(UInt8(ascii: "/")) else { return [] }
        let lines =
            inotifyNames
            ? inotifyEvents(record, path) : record.mask.isDisjoint(with: choice.printed) ? [] : [record.mask.names]
        guard !lines.isEmpty else { return [] }
        let slash = relative.lastIndex(of: UInt8(ascii: "/"))
        // The watched item as resolved: the record's path less "/NAME".
        var watched = path
        if !relative.isEmpty, path.count > relative.count, path.suffix(relative.count).elementsEqual(relative) {
            watched = Array(path.prefix(path.count - relative.count - 1))
        }
        var directory = given[watched] ?? watched
        if directory.count > 1, directory.last == UInt8(ascii: "/") { directory.removeLast() }
        var name = relative
        if let slash {
            directory += [UInt8(ascii: "/")] + relative[..<slash]
            name = Array(relative[(slash + 1)...])
        }
        let itselfIsDirectory = watchedDirectories.contains(watched)
        return lines.map {
            ShownEvent(directory: directory, name: name, events: $0, itselfIsDirectory: itselfIsDirectory)
        }
    }

    /// inotify's UNMOUNT, then IGNORED, for the watched item at `record.path` (as resolved when
    /// watched), as far as they are printed: its mount's server has gone.
    func unmounted(_ record: EventRecord) -> [ShownEvent] {
        guard inotifyNames else { return [] }
        let path = FileSystemName.bytes(record.path)
        var directory = given[path] ?? path
        if directory.count > 1, directory.last == UInt8(ascii: "/") { directory.removeLast() }
        let printed = choice.printedInotify
        return [(InotifyEvents.unmount, "UNMOUNT"), (InotifyEvents.ignored, "IGNORED")].filter {
            printed.contains($0.0)
        }.map {
            ShownEvent(
                directory: directory, name: [], events: [$0.1], itselfIsDirectory: watchedDirectories.contains(path))
        }
    }

    /// inotify's events for `record`, a line each, in the order inotify reports them: those
    /// this watch prints.
    private func inotifyEvents(_ record: EventRecord, _ path: [UInt8]) -> [[String]] {
        let mask = record.mask, itself = record.name.isEmpty
        func isDirectory(gone: Bool) -> [String] { self.isDirectory(path, gone: gone) ? ["ISDIR"] : [] }
        var lines: [(InotifyEvents, [String])] = []
        if mask.contains(.request) { return [] }
        if mask.contains(.subitemAppeared) {
            let kind = look(path)
            lines.append((.create, ["CREATE"] + (kind == S_IFDIR ? ["ISDIR"] : [])))
            // Told when its maker's access ends: for a file made by open(2), its close. (One
            // gone already is taken for a file, as most are.)
            if kind == nil || kind == S_IFREG { lines.append((.closeWrite, ["CLOSE_WRITE", "CLOSE"])) }
        } else if !mask.isDisjoint(with: [.changed, .subitemChanged]) {
            let directory = isDirectory(gone: false)
            if mask.contains(.metadataOnly) {
                lines.append((.attrib, ["ATTRIB"] + directory))
            } else if directory.isEmpty {
                // Told when the writer's access ends: for a program, its close. (inotify tells
                // of a directory's contents by its entries' events alone.)
                lines += [(.modify, ["MODIFY"]), (.closeWrite, ["CLOSE_WRITE", "CLOSE"])]
            }
        } else if mask.contains(.movedFrom) {
            lines.append(itself ? (.moveSelf, ["MOVE_SELF"]) : (.movedFrom, ["MOVED_FROM"] + isDirectory(gone: true)))
        } else if mask.contains(.movedTo) {
            if !itself { lines.append((.movedTo, ["MOVED_TO"] + isDirectory(gone: false))) }  // MOVE_SELF said it
        } else if mask.contains(.subitemDeleted) {
            lines.append((.delete, ["DELETE"] + isDirectory(gone: true)))
        } else if mask.contains(.presenterRemoved) {
            // The watch went with its item: inotify's IGNORED follows.
            lines += [(.deleteSelf, ["DELETE_SELF"]), (.ignored, ["IGNORED"])]
        }
        let printed = choice.printedInotify
        return lines.filter { printed.contains($0.0) }.map(\.1)
    }

    /// Whether the item is a directory: asked while it is there, remembered for when it is
    /// `gone` (deleted, moved away).
    private func isDirectory(_ path: [UInt8], gone: Bool) -> Bool {
        if gone { return lock.withLock { directories.remove(path) != nil } }
        return look(path) == S_IFDIR
    }

    /// The item's type (S_IFREG, S_IFDIR, ...), nil if it is not there; a directory is
    /// remembered, with those inside it under `-r`.
    private func look(_ path: [UInt8]) -> mode_t? {
        var info = stat()
        func look() -> Errno? { FileSystemName.withCString(path) { name -> Errno? in lstat(name, &info).failure } }
        var failure = look()
        // The mount tells presenters once its reply is written, which may be a moment before the
        // kernel has put the new entry in place of the one it looked up and did not find.
        for _ in 0..<25 where failure == .noSuchFileOrDirectory {
            usleep(2_000)
            failure = look()
        }
        guard failure == nil else { return nil }
        let kind = info.st_mode & S_IFMT
        if kind == S_IFDIR { remember(directoriesIn: path, depth: recursive ? 64 : 0, including: true) }
        return kind
    }

    /// Remembers `directory` (with `including`) and the directories below it, `depth` levels deep.
    private func remember(directoriesIn directory: [UInt8], depth: Int, including: Bool = false) {
        if including { lock.withLock { _ = directories.insert(directory) } }
        guard depth > 0, let stream = FileSystemName.withCString(directory, { opendir($0) }) else { return }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            guard entry.pointee.d_type == UInt8(DT_DIR) else { continue }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            remember(directoriesIn: directory + [UInt8(ascii: "/")] + name, depth: depth - 1, including: true)
        }
    }
}

// @unchecked Sendable: each line is written whole under `lock`, and the count of lines with it.
/// Prints records one a line, from any thread.
final class Printer: @unchecked Sendable {
    let json: Bool
    let format: EventFormat?
    let quiet: Bool
    let view: EventView
    /// The lines it prints at most (inotifywait's one event without -m), then none.
    let limit: Int?
    private let lock = NSLock()
    private var printed = 0

    init(json: Bool, format: EventFormat? = nil, quiet: Bool = false, view: EventView, limit: Int? = nil) {
        self.json = json
        self.format = format
        self.quiet = quiet
        self.view = view
        self.limit = limit
    }

    /// Prints what the watch shows of `record`; whether it printed anything. Written as bytes,
    /// one write(2) a record: a watcher prints a line for every event, and building a
    /// `String`, then `Data`, for `FileHandle` costs too much at that rate.
    @discardableResult
    func print(_ record: EventRecord) -> Bool {
        if json {
            guard view.reaches(record) else { return false }
            return write([WireCodec.encode(.event(record))])
        }
        return write(view.show(record).map { line(for: record, $0) })
    }

    /// inotify's UNMOUNT and IGNORED for the watched item `resolved`, as far as they are
    /// printed; whether anything was.
    func printUnmounted(_ resolved: String) -> Bool {
        let record = EventRecord(wd: 0, mask: [], cookie: 0, name: "", path: resolved)
        return write(view.unmounted(record).map { line(for: record, $0) })
    }

    private func line(for record: EventRecord, _ shown: ShownEvent) -> [UInt8] {
        if let format { return format.line(for: record, shown: shown) }
        var line = shown.directory
        line.reserveCapacity(shown.directory.count + shown.name.count + 64)
        line.append(UInt8(ascii: " "))
        line += shown.events.joined(separator: ",").utf8
        if !shown.name.isEmpty { line.append(UInt8(ascii: " ")); line += shown.name }
        if record.cookie != 0 { line += " cookie=\(record.cookie)".utf8 }
        if let origin = record.origin {
            // Who made the access, after what inotifywait's users parse.
            if let pid = origin.pid { line += " pid=\(pid)".utf8 }
            if let command = origin.command { line += " command=".utf8; line += Self.word(command) }
            if let purpose = origin.purpose { line += " purpose=".utf8; line += Self.word(purpose) }
            if let host = origin.host { line += " host=".utf8; line += Self.word(host) }
            line += " via=\(origin.via)".utf8
        }
        line.append(UInt8(ascii: "\n"))
        return line
    }

    private func write(_ lines: [[UInt8]]) -> Bool {
        guard !lines.isEmpty else { return false }
        return lock.withLock {
            var kept = lines[...]
            if let limit { kept = kept.prefix(max(0, limit - printed)) }
            guard !kept.isEmpty else { return false }
            printed += kept.count
            Self.writeAll(STDOUT_FILENO, Array(kept.joined()))
            return true
        }
    }

    /// A value as one word of the line: blanks and control characters become "_".
    private static func word(_ text: String) -> [UInt8] {
        text.utf8.map { $0 <= 0x20 || $0 == 0x7f ? UInt8(ascii: "_") : $0 }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = try? retryingInterrupts {
                bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            }
            // Any other failure drops the line. (A pipe whose reader left
            // raises SIGPIPE first, which ends the watch as it ends inotifywait.)
            guard let written, written > 0 else { return }
            offset += written
        }
    }

    func note(_ text: String) {
        if !json && !quiet { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }
}

/// inotifywait's `--format`: %w the directory holding the item (the watched path as given,
/// with a trailing slash, or the watched item itself, a directory with its slash), %f its name
/// in it (empty for the item itself), %e the events (%Xe: joined by X instead of commas), %c
/// the cookie, %T the time by a strftime(3) format, %% a percent; and coordfs's own: %p the
/// pid, %C the command and %o the route (mount, coordinator, outside, cluster) of whoever made
/// the access, %h the other host for cluster. (%w%f is the whole path, as with inotifywait.)
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

    /// inotifywait's own line, `--inotify-events` without --format or --csv: `%w %e %f` (the
    /// watched item's own events end with a blank, as inotifywait's do).
    static let inotifywait = EventFormat("%w %e %f", timeFormat: "%H:%M:%S")

    private func field(_ bytes: [UInt8]) -> [UInt8] {
        guard quotesFields,
            bytes.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 10 || $0 == 13 })
        else {
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

    func line(for record: EventRecord, shown: ShownEvent) -> [UInt8] {
        var line: [UInt8] = []
        var index = 0
        while index < pattern.count {
            let byte = pattern[index]
            guard byte == UInt8(ascii: "%"), index + 1 < pattern.count else { line.append(byte); index += 1; continue }
            switch pattern[index + 1] {
            case UInt8(ascii: "w"): line += field(shown.watched)
            case UInt8(ascii: "f"): line += field(shown.name)
            case UInt8(ascii: "e"): line += field(Array(shown.events.joined(separator: ",").utf8))
            case UInt8(ascii: "c"): line += String(record.cookie).utf8
            case UInt8(ascii: "T"): line += Self.now(timeFormat).utf8
            case UInt8(ascii: "p"): line += (record.origin?.pid.map(String.init) ?? "").utf8
            case UInt8(ascii: "C"): line += (record.origin?.command ?? "").utf8
            case UInt8(ascii: "o"): line += (record.origin?.via ?? "").utf8
            case UInt8(ascii: "h"): line += (record.origin?.host ?? "").utf8
            case UInt8(ascii: "%"): line.append(UInt8(ascii: "%"))
            case let separator where index + 2 < pattern.count && pattern[index + 2] == UInt8(ascii: "e"):
                line += field(Array(shown.events.map { Array($0.utf8) }.joined(separator: [separator])))
                index += 1
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
