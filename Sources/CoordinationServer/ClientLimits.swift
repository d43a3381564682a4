import Foundation

/// What clients may take of one server. A mount shared with `allow_other` serves every local
/// user, and without bounds one of them could take, for everyone, the daemon's descriptors (each
/// connection is one, from the same open-file limit the mount's files need), its threads (one a
/// connection) or its memory (a presenter a watch, a claim a hold, a registration a service).
/// Limits are counted per user id, as inotify counts its instances and watches, except holds
/// and services, counted per connection.
public struct ClientLimits: Sendable {
    /// Connections open at once, from every user (EMFILE beyond).
    public var connections: Int
    /// Connections open at once from one user (EMFILE beyond).
    public var connectionsPerUser: Int
    /// Watches of one user, over all their connections (ENOSPC beyond, as inotify_add_watch).
    public var watchesPerUser: Int
    /// Holds of one connection, granted or waited for (ENOSPC beyond).
    public var holdsPerConnection: Int
    /// Services one connection vends (ENOSPC beyond).
    public var servicesPerConnection: Int
    /// How long a new connection may keep its thread and place before its hello (EPROTO after).
    public var helloTimeout: Duration

    public init(connections: Int, connectionsPerUser: Int, watchesPerUser: Int, holdsPerConnection: Int,
                servicesPerConnection: Int, helloTimeout: Duration = .seconds(10)) {
        self.helloTimeout = helloTimeout
        self.connections = connections
        self.connectionsPerUser = connectionsPerUser
        self.watchesPerUser = watchesPerUser
        self.holdsPerConnection = holdsPerConnection
        self.servicesPerConnection = servicesPerConnection
    }

    /// 4096 connections leave a mount's default descriptor budget (12 000 of 20 000) room.
    public static let standard = ClientLimits(connections: 4096, connectionsPerUser: 256, watchesPerUser: 65_536,
                                              holdsPerConnection: 4096, servicesPerConnection: 1024)
}

// @unchecked Sendable: its counts are behind its lock.
/// The connections and watches each user has, against `ClientLimits`.
final class UserCounts: @unchecked Sendable {
    private let lock = NSLock()
    private var connections: [UInt32: Int] = [:]
    private var totalConnections = 0
    private var watches: [UInt32: Int] = [:]
    let limits: ClientLimits

    init(limits: ClientLimits) { self.limits = limits }

    /// Takes a connection for `uid`; nil when allowed, else why not.
    func takeConnection(for uid: UInt32) -> String? {
        lock.withLock {
            if totalConnections >= limits.connections { return "too many connections (at most \(limits.connections))" }
            guard Self.take(for: uid, in: &connections, under: limits.connectionsPerUser) else {
                return "too many connections of uid \(uid) (at most \(limits.connectionsPerUser))"
            }
            totalConnections += 1
            return nil
        }
    }

    func returnConnection(of uid: UInt32) {
        lock.withLock {
            totalConnections -= 1
            Self.give(1, of: uid, to: &connections)
        }
    }

    /// Takes a watch for `uid`; nil when allowed, else why not.
    func takeWatch(for uid: UInt32) -> String? {
        lock.withLock {
            Self.take(for: uid, in: &watches, under: limits.watchesPerUser) ? nil
                : "too many watches of uid \(uid) (at most \(limits.watchesPerUser))"
        }
    }

    func returnWatches(_ count: Int, of uid: UInt32) {
        guard count > 0 else { return }
        lock.withLock { Self.give(count, of: uid, to: &watches) }
    }

    /// One more for `uid` in `counts`, unless it has `limit` already.
    private static func take(for uid: UInt32, in counts: inout [UInt32: Int], under limit: Int) -> Bool {
        let mine = counts[uid, default: 0]
        guard mine < limit else { return false }
        counts[uid] = mine + 1
        return true
    }

    /// `count` fewer for `uid` in `counts`; a user with none leaves the table.
    private static func give(_ count: Int, of uid: UInt32, to counts: inout [UInt32: Int]) {
        let left = counts[uid, default: count] - count
        counts[uid] = left > 0 ? left : nil
    }
}
