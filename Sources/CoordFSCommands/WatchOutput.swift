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
}

// @unchecked Sendable: the directories it has seen are behind `lock`; the rest is immutable.
/// Turns records into what the text forms print: paths as given, `-r`'s reach, and with
/// `--inotify-events` inotify's names, ISDIR included.
final class EventView: @unchecked Sendable {
    /// The watched paths as the user gave them, by their resolved form (what records carry):
    /// bytes, as names are.
    private let given: [[UInt8]: [UInt8]]
    let recursive: Bool
    let inotifyNames: Bool
    private let lock = NSLock()
    /// Directories known inside the watched ones (resolved), for ISDIR on DELETE and MOVED_FROM,
    /// when the item is gone and can no longer be asked.
    private var directories = Set<[UInt8]>()

    init(given: [String: String], recursive: Bool, inotifyNames: Bool) {
        self.given = Dictionary(given.map { (FileSystemName.bytes($0.key), FileSystemName.bytes($0.value)) }) { first, _ in first }
        self.recursive = recursive
        self.inotifyNames = inotifyNames
        guard inotifyNames else { return }
        for resolved in self.given.keys { remember(directoriesIn: resolved, depth: recursive ? 64 : 1) }
    }

    /// inotify's names for the events a `-e` list may give (`-e create,modify`): the coordfs
    /// events that tell the same.
    static let inotifyAliases: [String: [String]] = [
        "CREATE": ["SUBITEM_APPEARED"], "MODIFY": ["CHANGED", "SUBITEM_CHANGED"], "DELETE": ["SUBITEM_DELETED"],
        "DELETE_SELF": ["PRESENTER_REMOVED"], "MOVE": ["MOVED_FROM", "MOVED_TO"], "MOVE_SELF": ["MOVED_FROM", "MOVED_TO"],
    ]

    /// Whether `record` is within this watch's reach: without `-r`, a watched directory's own
    /// entries (and the directory itself).
    func reaches(_ record: EventRecord) -> Bool {
        recursive || !record.name.utf8.contains(UInt8(ascii: "/"))
    }

    /// What to print of `record`; nil for what this watch does not print: an item deeper than
    /// a watched directory's own entries without `-r`, and with inotify's names, an event
    /// inotify has no name for (requests, REACQUIRE, BROKEN).
    func show(_ record: EventRecord) -> ShownEvent? {
        let path = FileSystemName.bytes(record.path), relative = FileSystemName.bytes(record.name)
        guard reaches(record) else { return nil }
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
        guard inotifyNames else { return ShownEvent(directory: directory, name: name, events: record.mask.names) }
        guard var events = inotifyEvents(record) else { return nil }
        if isDirectory(path, gone: !record.mask.isDisjoint(with: [.movedFrom, .subitemDeleted, .presenterRemoved])) {
            events.append("ISDIR")
        }
        return ShownEvent(directory: directory, name: name, events: events)
    }

    private func inotifyEvents(_ record: EventRecord) -> [String]? {
        let mask = record.mask, itself = record.name.isEmpty
        if mask.contains(.request) { return nil }
        if mask.contains(.subitemAppeared) { return ["CREATE"] }
        if mask.contains(.changed) || mask.contains(.subitemChanged) { return ["MODIFY"] }
        if mask.contains(.movedFrom) { return [itself ? "MOVE_SELF" : "MOVED_FROM"] }
        if mask.contains(.movedTo) { return itself ? nil : ["MOVED_TO"] }      // MOVE_SELF said it
        if mask.contains(.subitemDeleted) { return ["DELETE"] }
        if mask.contains(.presenterRemoved) { return ["DELETE_SELF"] }
        return nil
    }

    /// Whether the item is a directory: asked while it is there, remembered for when it is
    /// `gone` (deleted, moved away).
    private func isDirectory(_ path: [UInt8], gone: Bool) -> Bool {
        if gone { return lock.withLock { directories.remove(path) != nil } }
        var info = stat()
        func look() -> Errno? { FileSystemName.withCString(path) { name -> Errno? in lstat(name, &info) == 0 ? nil : Errno.current } }
        var failure = look()
        // The mount tells presenters once its reply is written, which may be a moment before the
        // kernel has put the new entry in place of the one it looked up and did not find.
        for _ in 0..<25 where failure == .noSuchFileOrDirectory {
            usleep(2_000)
            failure = look()
        }
        let isDirectory = failure == nil && (info.st_mode & S_IFMT) == S_IFDIR
        if isDirectory { remember(directoriesIn: path, depth: recursive ? 64 : 0, including: true) }
        return isDirectory
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

// @unchecked Sendable: each line is written whole under `lock`.
/// Prints records one a line, from any thread.
final class Printer: @unchecked Sendable {
    let json: Bool
    let format: EventFormat?
    let quiet: Bool
    let view: EventView
    private let lock = NSLock()
    init(json: Bool, format: EventFormat? = nil, quiet: Bool = false, view: EventView) {
        self.json = json
        self.format = format
        self.quiet = quiet
        self.view = view
    }

    /// Written as bytes, one write(2) a line: a watcher prints a line for every event, and
    /// building a `String`, then `Data`, for `FileHandle` costs too much at that rate.
    func print(_ record: EventRecord) {
        var line: [UInt8]
        if json {
            guard view.reaches(record) else { return }
            line = WireCodec.encode(.event(record))
        } else {
            guard let shown = view.show(record) else { return }
            if let format {
                line = format.line(for: record, shown: shown)
            } else {
                line = shown.directory
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
            }
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
/// with a trailing slash, or the watched item itself), %f its name in it (empty for the item
/// itself), %e the events, %c the cookie, %T the time by a strftime(3) format, %% a percent;
/// and coordfs's own: %p the pid, %C the command and %o the route (mount, coordinator,
/// outside, cluster) of whoever made the access, %h the other host for cluster. (%w%f is the
/// whole path, as with inotifywait.)
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

    func line(for record: EventRecord, shown: ShownEvent) -> [UInt8] {
        let watched = shown.name.isEmpty || shown.directory == [UInt8(ascii: "/")] ? shown.directory : shown.directory + [UInt8(ascii: "/")]
        var line: [UInt8] = []
        var index = 0
        while index < pattern.count {
            let byte = pattern[index]
            guard byte == UInt8(ascii: "%"), index + 1 < pattern.count else { line.append(byte); index += 1; continue }
            switch pattern[index + 1] {
            case UInt8(ascii: "w"): line += field(watched)
            case UInt8(ascii: "f"): line += field(shown.name)
            case UInt8(ascii: "e"): line += field(Array(shown.events.joined(separator: ",").utf8))
            case UInt8(ascii: "c"): line += String(record.cookie).utf8
            case UInt8(ascii: "T"): line += Self.now(timeFormat).utf8
            case UInt8(ascii: "p"): line += (record.origin?.pid.map(String.init) ?? "").utf8
            case UInt8(ascii: "C"): line += (record.origin?.command ?? "").utf8
            case UInt8(ascii: "o"): line += (record.origin?.via ?? "").utf8
            case UInt8(ascii: "h"): line += (record.origin?.host ?? "").utf8
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
