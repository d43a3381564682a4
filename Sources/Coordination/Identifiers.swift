/// Who holds intents. Intents of one identity never block each other (rule C4), and presenters
/// owned by an identity are never messaged about that identity's own accesses (C14).
public enum CoordinatorIdentity: Hashable, Sendable, CustomStringConvertible {
    /// A `FileCoordinator` purpose identifier; coordinators sharing one count as one.
    case purpose(String)
    /// An unmodified program coming through a mount: its thread-group id.
    case process(Int32)
    /// An object with no purpose string, such as a presenter (numbered by its owner).
    case object(UInt64)
    /// A coordinator in another process, reached through a control socket: one hold of the
    /// client `process` (or of the ancestor it holds for, flock's descriptor form), or a watch
    /// (presenter) and the holds taken for it (`number`, unique per server). What `process`
    /// does through a mount meanwhile is its accessors' own work.
    case client(process: Int32, number: UInt64)
    /// Another host of a shared store (`--cluster`), by its name: its accesses, as this host
    /// serves its recalls (this host's presenters relinquish and save for it).
    case host(String)

    public var description: String {
        switch self {
        case .purpose(let id): return "purpose:\(id)"
        case .process(let pid): return "pid:\(pid)"
        case .object(let number): return "object:\(number)"
        case .client(let pid, let number): return "pid:\(pid)#\(number)"
        case .host(let name): return "host:\(name)"
        }
    }

    /// The process the identity stands in, when it is one's.
    public var process: Int32? {
        switch self {
        case .process(let pid), .client(let pid, _): pid
        case .purpose, .object, .host: nil
        }
    }

    /// Whether intents of the two never block each other (C4): one coordinator; or a process's
    /// requests through a mount and a coordinator of that process (docs/decisions.md: a request made
    /// inside one of its own accessors belongs to it, and a process never waits for itself).
    /// Two coordinators of one process are two, as Apple's are.
    @inline(__always)
    public func isSameCoordinator(as other: CoordinatorIdentity) -> Bool {
        switch (self, other) {
        case (.process(let a), .process(let b)): a == b
        case (.process(let a), .client(let b, _)), (.client(let a, _), .process(let b)): a == b
        default: self == other
        }
    }

    /// Whether the two are of one process, whose accesses never message its own presenters:
    /// that process tells them itself (docs/decisions.md).
    public func isSameProcess(as other: CoordinatorIdentity) -> Bool {
        if let mine = process, let theirs = other.process { return mine == theirs }
        return self == other
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
