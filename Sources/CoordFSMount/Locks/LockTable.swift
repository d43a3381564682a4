// The locks of this host's programs on the mount's files, kept as Linux's fs/locks.c keeps them
// for a local filesystem, when the mount serves them itself (a host of a shared store: the kernel
// hands it flock's and fcntl's requests, `Filesystem+Locks.swift`). A value with no I/O and no
// lock of its own: `FileLocks` holds it behind its mutex.

/// Who holds a lock, as the kernel names it (FUSE's `lock_owner`): for fcntl's and lockf's locks
/// a process's table of open files (its threads share it; a child has its own), for flock's and
/// OFD locks an open file description.
struct LockOwner: Hashable, Sendable {
    let rawValue: UInt64
    init(_ rawValue: UInt64) { self.rawValue = rawValue }
}

/// flock(2)'s locks and POSIX locks (fcntl's, lockf's): the kernel keeps them apart, and so does
/// the table; a lock of one kind never conflicts with one of the other.
enum LockKind: Sendable, Equatable {
    case posix, flock
}

/// What a lock request does: take a shared (read) or an exclusive (write) lock, or unlock.
enum LockType: Sendable, Equatable {
    case shared, exclusive, unlock
}

/// Bytes `start` through `end` of a file, `end` included. An `end` of `endOfFile` reaches past the
/// end of the file however far it grows (fcntl's length 0; the kernel's OFFSET_MAX).
struct LockRange: Hashable, Sendable, CustomStringConvertible {
    static let endOfFile = Int64.max
    /// What a flock lock covers.
    static let wholeFile = LockRange(0, endOfFile)

    var start: Int64
    var end: Int64

    init(_ start: Int64, _ end: Int64) {
        self.start = start
        self.end = end
    }

    func overlaps(_ other: LockRange) -> Bool { start <= other.end && other.start <= end }

    /// Whether `other` begins right after this range, or ends right before it.
    func adjoins(_ other: LockRange) -> Bool {
        (end != Self.endOfFile && end + 1 == other.start) || (other.end != Self.endOfFile && other.end + 1 == start)
    }

    var description: String { "\(start)-\(end == Self.endOfFile ? "" : String(end))" }
}

/// A lock held.
struct FileLock: Equatable, Sendable {
    var kind: LockKind
    var owner: LockOwner
    var exclusive: Bool
    var range: LockRange
    /// The holder's process as the kernel named it (its pid in the mount's pid namespace), for
    /// F_GETLK to report.
    var pid: Int32
}

/// A lock request of the kernel's, in the table's terms.
struct LockRequest: Sendable, Equatable {
    /// The file's node.
    var node: NodeID
    /// The open file it came through (the open's handle).
    var handle: UInt64
    var kind: LockKind
    var owner: LockOwner
    var type: LockType
    var range: LockRange
    var pid: Int32
    /// The file's path below the store's root: what its locks are delegated by across hosts.
    /// Empty for an unlock, which asks nothing of other hosts.
    var path: String

    /// The one conflict predicate (fs/locks.c's posix_locks_conflict, flock_locks_conflict):
    /// another owner's lock of the same kind, over a byte of the request's, either exclusive.
    /// An owner never conflicts with itself: its new lock replaces what it held there.
    func conflicts(with lock: FileLock) -> Bool {
        type != .unlock && lock.kind == kind && lock.owner != owner && lock.range.overlaps(range)
            && (type == .exclusive || lock.exclusive)
    }
}

/// The locks held and the requests waiting, by file. POSIX locks are byte ranges per owner, split
/// and merged as an owner locks and unlocks parts (a new lock replaces the owner's own over its
/// range; adjacent and overlapping locks of one type merge), and go when their owner closes any
/// descriptor of the file (`removePOSIX`, at FLUSH). A flock lock is one per open file
/// description, of the whole file, converted in place (its old lock goes first, as on Linux), and
/// goes with the description's last close (`release`).
struct LockTable: Sendable {
    private struct File: Sendable {
        var locks: [FileLock] = []
        /// Requests waiting for a lock of this file to go, first come first.
        var queue: [(number: UInt, request: LockRequest)] = []
        /// The owners of POSIX locks set through each open of the file that still hold some. A
        /// process's locks go at any FLUSH of it, which takes it off every open; what is left at
        /// an open's release are OFD locks, whose owner is the open file itself, and which the
        /// kernel sends no FLUSH for.
        var posixOwners: [UInt64: Set<LockOwner>] = [:]
        /// Its path below the store's root, as its last lock request named it.
        var path = ""

        var isUnused: Bool { locks.isEmpty && queue.isEmpty && posixOwners.isEmpty }
    }

    private var files: [NodeID: File] = [:]

    /// How many owners a deadlock check follows (fs/locks.c's MAX_DEADLK_ITERATIONS).
    static let deadlockSteps = 10

    // MARK: Questions

    /// The locks held of `node`.
    func locks(on node: NodeID) -> [FileLock] { files[node]?.locks ?? [] }

    /// The first lock in the way of `request`, if any.
    func conflict(with request: LockRequest) -> FileLock? {
        files[request.node]?.locks.first { request.conflicts(with: $0) }
    }

    /// The strongest lock of `kind` that `owner` holds of `node`: nil when none, false when only
    /// shared ones, true when an exclusive one.
    func holding(_ owner: LockOwner, _ kind: LockKind, on node: NodeID) -> Bool? {
        var found: Bool?
        for lock in files[node]?.locks ?? [] where lock.kind == kind && lock.owner == owner {
            if lock.exclusive { return true }
            found = false
        }
        return found
    }

    /// Whether `request` asks for what its owner holds already: a flock lock of the same type,
    /// which flock(2) grants at once, looking at nobody else's.
    func holdsAlready(_ request: LockRequest) -> Bool {
        guard request.kind == .flock, request.type != .unlock else { return false }
        return files[request.node]?.locks.contains { lock in
            lock.kind == .flock && lock.owner == request.owner && lock.exclusive == (request.type == .exclusive)
        } ?? false
    }

    /// The requests waiting for `node`, first come first.
    func queue(of node: NodeID) -> [(number: UInt, request: LockRequest)] { files[node]?.queue ?? [] }

    /// Whether `request`, in the way of `lock`, would wait for itself: `lock`'s owner waits for
    /// a lock whose owner waits ... for a lock of the request's owner (fs/locks.c's
    /// posix_locks_deadlock; POSIX locks only, and only through this host's waiters: a wait for
    /// another host is not followed).
    func wouldDeadlock(_ request: LockRequest, blockedBy lock: FileLock) -> Bool {
        guard request.kind == .posix else { return false }
        var blocker = lock
        for _ in 0..<Self.deadlockSteps {
            guard let waiting = posixRequest(waitingBy: blocker.owner), let next = conflict(with: waiting) else {
                return false
            }
            if next.owner == request.owner { return true }
            blocker = next
        }
        return false
    }

    /// A POSIX request of `owner` that waits for a lock, if one does.
    private func posixRequest(waitingBy owner: LockOwner) -> LockRequest? {
        for file in files.values {
            if let found = file.queue.first(where: { $0.request.kind == .posix && $0.request.owner == owner }) {
                return found.request
            }
        }
        return nil
    }

    /// The files this host's programs hold locks of, by path: exclusive where any lock of it is
    /// (what the other hosts' lock requests must wait for).
    func heldFiles() -> [(path: String, exclusive: Bool)] {
        files.values.compactMap { file -> (path: String, exclusive: Bool)? in
            file.locks.isEmpty ? nil : (file.path, file.locks.contains { $0.exclusive })
        }
    }

    // MARK: Changes

    /// Takes, changes or drops `request`'s owner's lock, as asked: the caller has found nothing
    /// in its way (`conflict`).
    mutating func apply(_ request: LockRequest) {
        var file = files[request.node] ?? File()
        if !request.path.isEmpty { file.path = request.path }
        switch request.kind {
        case .posix: Self.applyPOSIX(request, to: &file)
        case .flock:
            file.locks.removeAll { $0.kind == .flock && $0.owner == request.owner }
            if request.type != .unlock {
                file.locks.append(
                    FileLock(
                        kind: .flock, owner: request.owner, exclusive: request.type == .exclusive,
                        range: .wholeFile, pid: request.pid))
            }
        }
        store(file, at: request.node)
    }

    /// The owner's POSIX locks over `request`'s range are replaced (split where they reach
    /// beyond it), and the new lock merged with the owner's locks of its type that it overlaps
    /// or adjoins (fs/locks.c's posix_lock_inode).
    private static func applyPOSIX(_ request: LockRequest, to file: inout File) {
        let exclusive = request.type == .exclusive
        var merged = request.range
        var kept: [FileLock] = []
        kept.reserveCapacity(file.locks.count + 2)
        for lock in file.locks {
            guard lock.kind == .posix, lock.owner == request.owner else {
                kept.append(lock)
                continue
            }
            if request.type != .unlock && lock.exclusive == exclusive
                && (lock.range.overlaps(request.range) || lock.range.adjoins(request.range))
            {
                merged = LockRange(min(merged.start, lock.range.start), max(merged.end, lock.range.end))
                continue
            }
            guard lock.range.overlaps(request.range) else {
                kept.append(lock)
                continue
            }
            // What it holds beyond the request's range, on either side, stays.
            if lock.range.start < request.range.start {
                var before = lock
                before.range = LockRange(lock.range.start, request.range.start - 1)
                kept.append(before)
            }
            if lock.range.end > request.range.end {
                var after = lock
                after.range = LockRange(request.range.end + 1, lock.range.end)
                kept.append(after)
            }
        }
        if request.type != .unlock {
            kept.append(
                FileLock(kind: .posix, owner: request.owner, exclusive: exclusive, range: merged, pid: request.pid))
            file.posixOwners[request.handle, default: []].insert(request.owner)
        }
        file.locks = kept
        if !kept.contains(where: { $0.kind == .posix && $0.owner == request.owner }) {
            Self.forget(request.owner, in: &file)
        }
    }

    /// A flock request for a lock of the other type than its owner holds: the old one goes first
    /// (flock(2) converts so), whatever the request comes to. Whether there was one.
    mutating func dropConverted(_ request: LockRequest) -> Bool {
        guard request.kind == .flock, request.type != .unlock, var file = files[request.node] else { return false }
        let before = file.locks.count
        file.locks.removeAll {
            $0.kind == .flock && $0.owner == request.owner && $0.exclusive != (request.type == .exclusive)
        }
        guard file.locks.count != before else { return false }
        store(file, at: request.node)
        return true
    }

    /// Drops every POSIX lock of `owner` on `node`: the process closed a descriptor of the file
    /// (FLUSH). Whether it held any.
    mutating func removePOSIX(of owner: LockOwner, on node: NodeID) -> Bool {
        guard var file = files[node] else { return false }
        let before = file.locks.count
        file.locks.removeAll { $0.kind == .posix && $0.owner == owner }
        let changed = file.locks.count != before
        Self.forget(owner, in: &file)
        store(file, at: node)
        return changed
    }

    /// The open `handle` of `node` is released (its last descriptor closed): the flock lock of
    /// `flockOwner` goes (the kernel names it when the open took one), and the OFD locks set
    /// through it. Whether any went.
    mutating func release(_ handle: UInt64, on node: NodeID, flockOwner: LockOwner?) -> Bool {
        guard var file = files[node] else { return false }
        let before = file.locks.count
        if let flockOwner { file.locks.removeAll { $0.kind == .flock && $0.owner == flockOwner } }
        for owner in file.posixOwners[handle] ?? [] {
            file.locks.removeAll { $0.kind == .posix && $0.owner == owner }
            Self.forget(owner, in: &file)
        }
        file.posixOwners[handle] = nil
        let changed = file.locks.count != before
        store(file, at: node)
        return changed
    }

    /// `request` (number `number`) waits for a lock of its file to go.
    mutating func enqueue(_ number: UInt, _ request: LockRequest) {
        var file = files[request.node] ?? File()
        file.queue.append((number, request))
        store(file, at: request.node)
    }

    /// Request `number` no longer waits in `node`'s queue. Whether it did.
    @discardableResult
    mutating func dequeue(_ number: UInt, on node: NodeID) -> Bool {
        guard var file = files[node], let index = file.queue.firstIndex(where: { $0.number == number }) else {
            return false
        }
        file.queue.remove(at: index)
        store(file, at: node)
        return true
    }

    /// `owner` holds no POSIX lock of the file any more: no open of it names it.
    private static func forget(_ owner: LockOwner, in file: inout File) {
        guard !file.posixOwners.isEmpty else { return }
        for (handle, var owners) in file.posixOwners where owners.contains(owner) {
            owners.remove(owner)
            file.posixOwners[handle] = owners.isEmpty ? nil : owners
        }
    }

    private mutating func store(_ file: File, at node: NodeID) {
        files[node] = file.isUnused ? nil : file
    }
}
