import Foundation

/// What clients may take of one server. A mount shared with `allow_other` serves every local
/// user, and without bounds one of them could take, for everyone, the daemon's descriptors (each
/// connection is one, from the same open-file limit the mount's files need), its threads (one a
/// connection) or its memory (a presenter a watch, a claim a hold, a registration a service).
/// Limits are counted per user id, as inotify counts its instances and watches, except holds
/// and services, counted per connection; memory is counted per user id too, so that no number
/// of connections, each within its own counts, adds up to more than one user's share.
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
    /// Bytes of the server's memory one user's holds (granted or waited for) and the lines
    /// waiting for their connections to read them may take, over all their connections: a hold
    /// past it fails with ENOMEM, as an allocation past a process's own limit does, and a
    /// connection whose unread lines would pass it is given up, as one past `Outbox`'s capacity.
    public var memoryPerUser: Int

    public init(
        connections: Int, connectionsPerUser: Int, watchesPerUser: Int, holdsPerConnection: Int,
        servicesPerConnection: Int, helloTimeout: Duration = .seconds(10), memoryPerUser: Int = 64 << 20
    ) {
        self.helloTimeout = helloTimeout
        self.connections = connections
        self.connectionsPerUser = connectionsPerUser
        self.watchesPerUser = watchesPerUser
        self.holdsPerConnection = holdsPerConnection
        self.servicesPerConnection = servicesPerConnection
        self.memoryPerUser = memoryPerUser
    }

    /// 4096 connections leave a mount's default descriptor budget (12 000 of 20 000) room.
    /// 64 MiB a user is some 150 000 intents (a dozen connections of 4096 holds of 64 intents
    /// each took 1.23 GB with no bound), or 8 connections' worth of unread lines.
    public static let standard = ClientLimits(
        connections: 4096, connectionsPerUser: 256, watchesPerUser: 65_536,
        holdsPerConnection: 4096, servicesPerConnection: 1024, memoryPerUser: 64 << 20)

    /// What a hold is counted as, beside its intents: the connection's record of it, the
    /// engine's grant, the claim (and the access, if it waited), the process's accessor hold.
    public static let bytesPerHold = 1024
    /// What an intent is counted as, beside its path: its places in the engine's hold table
    /// and the claim, its item's state at the grant.
    public static let bytesPerIntent = 400

    /// What a hold of items at `paths` is counted as against its user's memory: each path is
    /// kept twice (as the engine knows the item, and where it is on disk).
    public static func bytes(ofHoldOn paths: some Sequence<String>) -> Int {
        paths.reduce(bytesPerHold) { total, path in total + bytesPerIntent + 2 * path.utf8.count }
    }
}

// @unchecked Sendable: its counts are behind its lock.
/// The connections, watches and memory each user has, against `ClientLimits`. Its lock is
/// the last taken: it calls nothing while holding it (an outbox takes it under its own).
final class UserCounts: @unchecked Sendable {
    private let lock = NSLock()
    private var connections: [UInt32: Int] = [:]
    private var totalConnections = 0
    private var watches: [UInt32: Int] = [:]
    /// Bytes each user's holds and unread lines are counted as (`ClientLimits.memoryPerUser`).
    private var memoryTaken: [UInt32: Int] = [:]
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
            Self.take(for: uid, in: &watches, under: limits.watchesPerUser)
                ? nil
                : "too many watches of uid \(uid) (at most \(limits.watchesPerUser))"
        }
    }

    func returnWatches(_ count: Int, of uid: UInt32) {
        guard count > 0 else { return }
        lock.withLock { Self.give(count, of: uid, to: &watches) }
    }

    /// Takes `bytes` of `uid`'s memory, all or none; nil when allowed, else why not.
    func takeMemory(_ bytes: Int, for uid: UInt32) -> String? {
        lock.withLock {
            let mine = memoryTaken[uid, default: 0]
            guard bytes <= limits.memoryPerUser - mine else {
                return
                    "too much memory of uid \(uid) (at most \(limits.memoryPerUser) bytes of holds, their intents and unread lines)"
            }
            memoryTaken[uid] = mine + bytes
            return nil
        }
    }

    func returnMemory(_ bytes: Int, of uid: UInt32) {
        guard bytes > 0 else { return }
        lock.withLock { Self.give(bytes, of: uid, to: &memoryTaken) }
    }

    /// The bytes `uid` has taken now.
    func memory(of uid: UInt32) -> Int { lock.withLock { memoryTaken[uid, default: 0] } }

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

/// One user's memory at a server, as one of their connections draws on it: what its outbox
/// holds for the client to read is counted with the user's holds (`UserCounts`).
struct UserMemory: Sendable {
    let counts: UserCounts
    let uid: UInt32

    /// Takes `bytes`; nil when taken, else why not.
    func take(_ bytes: Int) -> String? { counts.takeMemory(bytes, for: uid) }

    func give(_ bytes: Int) { counts.returnMemory(bytes, of: uid) }
}
