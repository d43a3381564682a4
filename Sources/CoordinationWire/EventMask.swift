/// What a watch wants to hear, and what an event record says: bits, as inotify's masks.
public struct EventMask: OptionSet, Hashable, Sendable, Codable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    // Requests: the access waits for the answer.
    public static let relinquishToReader = EventMask(rawValue: 1 << 0)
    public static let relinquishToWriter = EventMask(rawValue: 1 << 1)
    public static let save = EventMask(rawValue: 1 << 2)
    public static let accommodateDeletion = EventMask(rawValue: 1 << 3)
    public static let accommodateSubitemDeletion = EventMask(rawValue: 1 << 4)
    /// Before the item's local content is evicted (a write with `forEvicting`); a refusal keeps it.
    public static let accommodateEviction = EventMask(rawValue: 1 << 6)
    // Notifications.
    public static let reacquire = EventMask(rawValue: 1 << 5)
    public static let changed = EventMask(rawValue: 1 << 8)
    public static let movedFrom = EventMask(rawValue: 1 << 9)
    public static let movedTo = EventMask(rawValue: 1 << 10)
    public static let subitemAppeared = EventMask(rawValue: 1 << 11)
    public static let subitemChanged = EventMask(rawValue: 1 << 12)
    public static let subitemDeleted = EventMask(rawValue: 1 << 13)
    public static let presenterRemoved = EventMask(rawValue: 1 << 15)
    /// To a provider: a client connected to one of its services (the record carries the socket;
    /// `wd` is the service, `name` its name, `path` the item the client asked about).
    public static let serviceConnection = EventMask(rawValue: 1 << 16)
    /// An access to the item went ahead without waiting any longer for its holders (the break
    /// time, a settled file, a kernel lock); to a client whose hold it was, `cookie` names the hold.
    public static let broken = EventMask(rawValue: 1 << 17)
    /// A version of the item (or, with a name, of an item inside) was kept as an unresolved
    /// conflict: its content was replaced by a writer that had not seen it, a lost update.
    /// `cookie` is the version's identifier (`coordfs versions`).
    public static let conflict = EventMask(rawValue: 1 << 18)
    /// A program added a version of the item (or, with a name, of an item inside): Apple's
    /// `NSFileVersion.addOfItem`. `cookie` is the version's identifier.
    public static let versionAdded = EventMask(rawValue: 1 << 19)
    /// A version of the item (or of an item inside) was removed by a program; `cookie` names it.
    public static let versionRemoved = EventMask(rawValue: 1 << 20)
    /// A conflict version of the item (or of an item inside) was marked resolved; `cookie` names it.
    public static let conflictResolved = EventMask(rawValue: 1 << 21)
    /// Set with `changed` or `subitemChanged` when the change was to the item's attributes
    /// alone (chmod, chown, utimes, an extended attribute: a write with
    /// contentIndependentMetadataOnly), what inotify tells as ATTRIB rather than MODIFY.
    public static let metadataOnly = EventMask(rawValue: 1 << 22)
    /// Set on records that wait for an answer.
    public static let request = EventMask(rawValue: 1 << 30)

    public static let requests: EventMask = [
        .relinquishToReader, .relinquishToWriter, .save, .accommodateDeletion, .accommodateSubitemDeletion,
        .accommodateEviction
    ]
    public static let all: EventMask = [
        .requests, .reacquire, .changed, .movedFrom, .movedTo, .subitemAppeared,
        .subitemChanged, .subitemDeleted, .presenterRemoved, .broken, .conflict,
        .versionAdded, .versionRemoved, .conflictResolved
    ]

    /// The names used on the wire and by `coordfs watch`.
    public static let names: [(String, EventMask)] = [
        ("RELINQUISH_READER", .relinquishToReader), ("RELINQUISH_WRITER", .relinquishToWriter), ("SAVE", .save),
        ("ACCOMMODATE_DELETION", .accommodateDeletion), ("ACCOMMODATE_SUBITEM_DELETION", .accommodateSubitemDeletion),
        ("ACCOMMODATE_EVICTION", .accommodateEviction),
        ("REACQUIRE", .reacquire), ("CHANGED", .changed), ("MOVED_FROM", .movedFrom), ("MOVED_TO", .movedTo),
        ("SUBITEM_APPEARED", .subitemAppeared), ("SUBITEM_CHANGED", .subitemChanged),
        ("SUBITEM_DELETED", .subitemDeleted),
        ("PRESENTER_REMOVED", .presenterRemoved), ("SERVICE_CONNECTION", .serviceConnection), ("BROKEN", .broken),
        ("CONFLICT", .conflict), ("VERSION_ADDED", .versionAdded), ("VERSION_REMOVED", .versionRemoved),
        ("CONFLICT_RESOLVED", .conflictResolved),
        ("METADATA_ONLY", .metadataOnly), ("REQUEST", .request)
    ]

    public var names: [String] { Self.names.filter { contains($0.1) }.map(\.0) }

    /// A mask from names such as `["SAVE", "CHANGED"]`, or nil if one is unknown. "ALL" is all.
    public init?(names: [String]) {
        var mask = EventMask()
        for name in names {
            if name == "ALL" { mask.formUnion(.all); continue }
            guard let bit = Self.names.first(where: { $0.0 == name })?.1 else { return nil }
            mask.formUnion(bit)
        }
        self = mask
    }
}
