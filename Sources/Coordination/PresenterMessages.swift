/// A question put to a presenter before an access; the access waits for every answer (P14).
public enum PresenterRequest: Hashable, Sendable {
    case relinquishToReader  // P4
    case relinquishToWriter  // P5
    case saveChanges  // P6
    case accommodateDeletion  // P7
    case accommodateSubitemDeletion(ItemPath)  // P13
    case accommodateEviction  // P33

    /// Kinds of request, as a set: what a presenter answers.
    public struct Kinds: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let relinquishToReader = Kinds(rawValue: 1 << 0)
        public static let relinquishToWriter = Kinds(rawValue: 1 << 1)
        public static let saveChanges = Kinds(rawValue: 1 << 2)
        public static let accommodateDeletion = Kinds(rawValue: 1 << 3)
        public static let accommodateSubitemDeletion = Kinds(rawValue: 1 << 4)
        public static let accommodateEviction = Kinds(rawValue: 1 << 5)
        public static let all: Kinds = [
            .relinquishToReader, .relinquishToWriter, .saveChanges, .accommodateDeletion,
            .accommodateSubitemDeletion, .accommodateEviction
        ]
    }

    public var kind: Kinds {
        switch self {
        case .relinquishToReader: return .relinquishToReader
        case .relinquishToWriter: return .relinquishToWriter
        case .saveChanges: return .saveChanges
        case .accommodateDeletion: return .accommodateDeletion
        case .accommodateSubitemDeletion: return .accommodateSubitemDeletion
        case .accommodateEviction: return .accommodateEviction
        }
    }

    /// Relinquishing comes before saving and accommodating, in Apple's order (docs/swift.md).
    public var deliveryRank: Int {
        switch self {
        case .relinquishToReader, .relinquishToWriter: return 0
        case .saveChanges: return 1
        case .accommodateDeletion, .accommodateSubitemDeletion, .accommodateEviction: return 2
        }
    }
}

/// News for a presenter after an access; nobody waits for it.
public enum PresenterNotification: Hashable, Sendable {
    case didMove(to: ItemPath)  // P8
    case didChange  // P9
    case subitemDidAppear(ItemPath)  // P10
    case subitemDidMove(from: ItemPath, to: ItemPath)  // P11
    case subitemDidChange(ItemPath)  // P12
    /// `didChange` of the item's attributes alone (a write with contentIndependentMetadataOnly:
    /// chmod, chown, utimes). Apple tells it as did-change; the event channel flags it, for
    /// inotify's ATTRIB.
    case didChangeAttributes
    /// `subitemDidChange` of an item's attributes alone.
    case subitemDidChangeAttributes(ItemPath)
    /// An item inside was deleted. Apple has no callback for it; the event channel has.
    case subitemWasDeleted(ItemPath)
    /// The presented item itself was deleted (the event channel removes the watch).
    case itemWasDeleted
    /// An access to the item went ahead without waiting any longer for those that held it: a
    /// broken lease (the break time, a settled file, a kernel lock). coordfs's own: Apple has none.
    case coordinationWasBroken
    /// One of the item's versions was added, removed or resolved (`VersionNews`); the version's
    /// identifier. Apple's `presentedItemDidGain(_:)`, `DidLose(_:)` and `DidResolveConflict(_:)` (P18).
    case versionNews(VersionNews, String)
    /// The same of an item inside: `presentedSubitem(at:didGain:)` and its kin.
    case subitemVersionNews(ItemPath, VersionNews, String)

    /// True for the subitem notifications a package presenter may receive as did-change (P20).
    public var isSubitemNotification: Bool {
        switch self {
        case .subitemDidAppear, .subitemDidMove, .subitemDidChange, .subitemDidChangeAttributes, .subitemWasDeleted,
            .subitemVersionNews:
            return true
        case .didMove, .didChange, .didChangeAttributes, .itemWasDeleted, .coordinationWasBroken, .versionNews:
            return false
        }
    }
}

/// What happened to a version of an item, as its presenters hear it.
public enum VersionNews: String, Hashable, Sendable {
    /// A version was kept as an unresolved conflict: its content was replaced by a writer that
    /// had not seen it (a lost update).
    case gainedConflict
    /// A program added a version (`FileVersion.addOfItem`).
    case gained
    /// A program removed a version.
    case lost
    /// A conflict version was marked resolved.
    case resolved
}

/// Messages for one presenter, in delivery order.
public struct PresenterDelivery<Message: Hashable & Sendable>: Sendable {
    public let presenter: PresenterID
    /// The presenter's item as the engine knows it now.
    public let presentedPath: ItemPath
    /// Whether that item is a file package (for the did-change fallback, P20).
    public let presentsPackage: Bool
    public internal(set) var messages: [Message]
    /// Whose access the messages are about (docs/protocol.md: every message carries its origin); nil
    /// where nobody coordinated it.
    public internal(set) var accessor: CoordinatorIdentity? = nil
}

/// The notifications that follow one intent of a granted access.
public struct IntentOutcome: Hashable, Sendable {
    public var existedBefore: Bool
    public var existsAfter: Bool
    /// Whether the item's contents or attributes changed (ignored unless it existed before and after).
    public var changed: Bool
    public init(existedBefore: Bool, existsAfter: Bool, changed: Bool = true) {
        self.existedBefore = existedBefore
        self.existsAfter = existsAfter
        self.changed = changed
    }
}
