import ArgumentParser
import CoordinationWire

/// inotify's events, by inotifywait's names, and what `coordfs watch --inotify-events` makes of
/// the event channel's. The channel tells accesses as they end, not system calls: a writer's
/// changes come when it closes the file (MODIFY, then CLOSE_WRITE), a file's making when its
/// maker closes it (CREATE, then CLOSE_WRITE), and reads and opens reach the read item's own
/// watch as requests, never its directory's.
struct InotifyEvents: OptionSet, Hashable, Sendable {
    let rawValue: UInt32
    init(rawValue: UInt32) { self.rawValue = rawValue }

    // inotify's own bits (IN_ACCESS and on).
    static let access = InotifyEvents(rawValue: 0x1)
    static let modify = InotifyEvents(rawValue: 0x2)
    static let attrib = InotifyEvents(rawValue: 0x4)
    static let closeWrite = InotifyEvents(rawValue: 0x8)
    static let closeNowrite = InotifyEvents(rawValue: 0x10)
    static let open = InotifyEvents(rawValue: 0x20)
    static let movedFrom = InotifyEvents(rawValue: 0x40)
    static let movedTo = InotifyEvents(rawValue: 0x80)
    static let create = InotifyEvents(rawValue: 0x100)
    static let delete = InotifyEvents(rawValue: 0x200)
    static let deleteSelf = InotifyEvents(rawValue: 0x400)
    static let moveSelf = InotifyEvents(rawValue: 0x800)
    static let unmount = InotifyEvents(rawValue: 0x2000)
    static let ignored = InotifyEvents(rawValue: 0x8000)

    /// What inotifywait prints without `-e`: IN_ALL_EVENTS (UNMOUNT and IGNORED only when named).
    static let all = InotifyEvents(rawValue: 0xfff)

    /// The names `-e` takes, as inotifywait spells them (in either case).
    static let names: [(String, InotifyEvents)] = [
        ("access", .access), ("modify", .modify), ("attrib", .attrib), ("close_write", .closeWrite),
        ("close_nowrite", .closeNowrite), ("close", [.closeWrite, .closeNowrite]), ("open", .open),
        ("moved_from", .movedFrom), ("moved_to", .movedTo), ("move", [.movedFrom, .movedTo]), ("create", .create),
        ("delete", .delete), ("delete_self", .deleteSelf), ("move_self", .moveSelf), ("unmount", .unmount),
        ("ignored", .ignored), ("all_events", .all)
    ]

    /// The names nothing would ever answer, and why: refused, rather than waited for in vain.
    static let untold: [String: String] = [
        "access":
            "coordfs hears of a read as one access, not of each read(2): as a RELINQUISH_READER request to the read item's own watch, never its directory's",
        "open":
            "coordfs hears of an open only as the request it puts to the opened item's own watch (RELINQUISH_READER, RELINQUISH_WRITER), never its directory's",
        "close_nowrite":
            "a close after reading changes nothing, and nothing is told of it (close and close_write hear writers' closes)"
    ]

    /// The channel's events that tell these.
    var channelEvents: EventMask {
        var mask: EventMask = []
        if contains(.create) { mask.insert(.subitemAppeared) }
        if !isDisjoint(with: [.modify, .attrib]) { mask.formUnion([.changed, .subitemChanged]) }
        // A writer's close: of a file it changed, or made.
        if contains(.closeWrite) { mask.formUnion([.changed, .subitemChanged, .subitemAppeared]) }
        if !isDisjoint(with: [.movedFrom, .movedTo, .moveSelf]) { mask.formUnion([.movedFrom, .movedTo]) }
        if contains(.delete) { mask.insert(.subitemDeleted) }
        if !isDisjoint(with: [.deleteSelf, .ignored]) { mask.insert(.presenterRemoved) }
        return mask
    }

    /// The events the channel's `mask` tells, in inotify's names.
    init(toldBy mask: EventMask) {
        self = []
        if mask.contains(.subitemAppeared) { insert(.create) }
        if !mask.isDisjoint(with: [.changed, .subitemChanged]) { formUnion([.modify, .attrib, .closeWrite]) }
        if !mask.isDisjoint(with: [.movedFrom, .movedTo]) { formUnion([.movedFrom, .movedTo, .moveSelf]) }
        if mask.contains(.subitemDeleted) { insert(.delete) }
        if mask.contains(.presenterRemoved) { insert(.deleteSelf) }
    }
}

/// What a watch's `-e` asks for: coordfs's events by the channel's names, and inotify's by
/// inotifywait's, which stand for the channel events that tell the same.
struct EventChoice: Equatable, Sendable {
    var channel: EventMask
    var inotify: InotifyEvents

    /// Without `-e`: every event, in the names the watch prints.
    static func everything(inotifyNames: Bool) -> EventChoice {
        inotifyNames ? EventChoice(channel: [], inotify: .all) : EventChoice(channel: .all, inotify: [])
    }

    /// The channel's events whose records the watch prints (in coordfs's names, or as JSON).
    var printed: EventMask { channel.union(inotify.channelEvents) }

    /// inotify's events `--inotify-events` prints: those named, and those the coordfs events
    /// named tell.
    var printedInotify: InotifyEvents { inotify.union(InotifyEvents(toldBy: channel)) }

    /// What the watch asks its server for: what it prints, and the watched item's deletion,
    /// which ends the watch (inotify's IGNORED) whether printed or not. Items made and moved in
    /// too where deletions and moves away are printed: a directory among them is known as one
    /// once it has gone (ISDIR).
    var asked: EventMask {
        var mask = printed.union(.presenterRemoved)
        if !inotify.isDisjoint(with: [.delete, .movedFrom]) { mask.formUnion([.subitemAppeared, .movedTo]) }
        return mask
    }

    /// `-e`'s values, each a comma-separated list of names: coordfs's (in either case, ALL for
    /// every one) and inotifywait's.
    init(_ lists: [String], inotifyNames: Bool) throws(ValidationError) {
        let names = lists.flatMap { $0.split(separator: ",") }.map { String($0).trimmingCharacters(in: .whitespaces) }
        self = names.isEmpty ? .everything(inotifyNames: inotifyNames) : EventChoice(channel: [], inotify: [])
        for name in names {
            let word = name.lowercased()
            if let why = InotifyEvents.untold[word] { throw ValidationError("-e: '\(name)' cannot be watched: \(why)") }
            if let events = InotifyEvents.names.first(where: { $0.0 == word })?.1 {
                inotify.formUnion(events)
            } else if let mask = EventMask(names: [name.uppercased()]) {
                channel.formUnion(mask)
            } else {
                throw ValidationError(
                    "unknown event name '\(name)' in -e/--events: coordfs's are listed by --help (SAVE, CHANGED, ...), "
                        + "inotifywait's are " + InotifyEvents.names.map(\.0).joined(separator: ", "))
            }
        }
    }

    init(channel: EventMask, inotify: InotifyEvents) {
        self.channel = channel
        self.inotify = inotify
    }
}
