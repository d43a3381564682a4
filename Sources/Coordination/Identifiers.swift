/// Who holds intents. Intents of one identity never block each other (rule C4), and presenters
/// owned by an identity are never messaged about that identity's own accesses (C14).
public enum CoordinatorIdentity: Hashable, Sendable, CustomStringConvertible {
    /// A `FileCoordinator` purpose identifier; coordinators sharing one count as one.
    case purpose(String)
    /// An unmodified program coming through a mount: its thread-group id.
    case process(Int32)
    /// An object with no purpose string, such as a presenter (numbered by its owner).
    case object(UInt64)

    public var description: String {
        switch self {
        case .purpose(let id): return "purpose:\(id)"
        case .process(let pid): return "pid:\(pid)"
        case .object(let number): return "object:\(number)"
        }
    }
}

/// One granted coordination call: all its intents are held together and released together.
/// It names a slot of the engine's grant table and that slot's generation (below 2³¹), or, with
/// the top bit set, a grant on the engine's short list by its number (`ShortList`).
public struct GrantID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    private static let shortListFlag: UInt64 = 1 << 63

    init(index: UInt32, generation: UInt32) {
        assert(generation < 1 << 31, "a slot's generation leaves the top bit to the short list")
        rawValue = UInt64(generation) << 32 | UInt64(index)
    }

    init(shortListNumber number: UInt64) {
        rawValue = Self.shortListFlag | number
    }

    /// Whether the grant is on the engine's short list (`ShortList`): it was made while no
    /// presenter was registered, and reports no move.
    public var isOnShortList: Bool { rawValue & Self.shortListFlag != 0 }
    var shortListNumber: UInt64 { rawValue & ~Self.shortListFlag }

    var index: UInt32 { UInt32(truncatingIfNeeded: rawValue) }
    var generation: UInt32 { UInt32(truncatingIfNeeded: rawValue >> 32) }

    public var description: String { isOnShortList ? "grant#list.\(shortListNumber)" : "grant#\(index).\(generation)" }
}

/// A request that is waiting; abandon it with `CoordinationEngine.abandon(_:because:)`.
public struct TicketID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public var description: String { "ticket#\(rawValue)" }
}

/// A registered presenter.
public struct PresenterID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "presenter#\(rawValue)" }
}

/// A vended service registration.
public struct ServiceRegistrationID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "service#\(rawValue)" }
}
