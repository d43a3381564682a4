import Logging
import Synchronization

/// What a host's side of the cluster needs of the host's own coordination.
public protocol LocalAccesses: Sendable {
    /// What this host's programs and coordinators hold now: store paths ("" the root) and
    /// modes; other hosts' accesses (`beginAccess`) left out.
    func holders() -> [(path: String, mode: Delegations.Mode)]
    /// Begins `host`'s access of `path` on this host: its presenters save or relinquish as for
    /// a local reader or writer. Ended by `LocalAccess.end`.
    func beginAccess(for host: String, _ path: String, _ mode: Delegations.Mode) -> any LocalAccess
}

/// Another host's access begun on this host (`LocalAccesses.beginAccess`).
public protocol LocalAccess: Sendable {
    func end()
}

/// One host of a shared store: the delegations it holds, so that it grants its own programs in
/// memory, and its answers to other hosts' recalls.
///
/// A host asks for as much as nobody else wants: for an item, the delegation of its outermost
/// directory below the store's root that no other host has a conflicting key in or above, so a
/// host alone in a subtree asks etcd once. A recall narrows it: the host stops granting under
/// the recalled delegation, asks its presenters for the other host's access, waits until none
/// of its own holders conflicts with the other host's key (or the break time passes), takes
/// finer delegations for the holders that go on, and gives the recalled one back.
public final class ClusterMember: Sendable {
    private let join: @Sendable () async throws -> Delegations
    private let local: any LocalAccesses
    private let breakTime: Duration
    private let logger = Logger(label: "org.coordfs.cluster")
    private let state: Mutex<State>
    private let tasks = Mutex<[Task<Void, Never>]>([])

    struct Key: Hashable, Sendable {
        var path: String
        var mode: Delegations.Mode
    }

    private struct State {
        /// This run's delegations (a new lease after a lost one is a new run); nil while the
        /// host is not a member.
        var delegations: Delegations?
        /// Held and granted from: by path, which modes.
        var held: [String: Modes] = [:]
        /// Recalled, being given back: the other hosts' keys that want them.
        var recalled: [Key: [Delegations.Entry]] = [:]
        /// Acquires under way, shared by the requests that need them.
        var acquiring: [Key: Task<Void, Error>] = [:]
        var leaving = false
    }

    private struct Modes: OptionSet {
        let rawValue: UInt8
        static let read = Modes(rawValue: 1)
        static let write = Modes(rawValue: 2)
        init(rawValue: UInt8) { self.rawValue = rawValue }
        init(_ mode: Delegations.Mode) { self = mode == .read ? .read : .write }
        /// Holding `mode`: a write delegation serves reads too.
        func serves(_ mode: Delegations.Mode) -> Bool { mode == .read ? !isEmpty : contains(.write) }
    }

    /// `join`: a new run's delegations, started (a lease granted, the store read and followed).
    /// `breakTime`: how long a recall waits for this host's holders that conflict with it before
    /// it gives the delegation back regardless (nil: for as long as they hold).
    public init(join: @escaping @Sendable () async throws -> Delegations, local: any LocalAccesses, breakTime: Duration?) {
        self.join = join
        self.local = local
        self.breakTime = breakTime ?? .seconds(Int64.max / 4)
        state = Mutex(State())
    }

    /// Joins, and from then on answers recalls; joins again whenever the lease is lost.
    public func start() async throws {
        let delegations = try await join()
        begin(delegations)
    }

    private func begin(_ delegations: Delegations) {
        state.withLock { state in
            state.delegations = delegations
            state.held = [:]
            state.recalled = [:]
        }
        let recalls = Task { [self] in
            for await recall in delegations.recalls { recalled(recall, in: delegations) }
        }
        let loss = Task { [self] in
            await delegations.lease.waitUntilLost()
            let leaving = state.withLock { state -> Bool in
                if state.delegations === delegations {
                    state.delegations = nil
                    state.held = [:]
                }
                return state.leaving
            }
            delegations.stop()
            if leaving { return }
            logger.error("cluster: this host's lease is lost: it grants nothing until it has joined again")
            await rejoin(after: delegations.lease)
        }
        tasks.withLock { $0 += [recalls, loss] }
    }

    /// Joins again, once a second until it can. The lost lease is revoked first where etcd can
    /// be reached (it may still live there, a host cut off for less than its TTL): the keys of
    /// the run that lost it would otherwise stand in the new run's way until it expired.
    private func rejoin(after lost: HostLease) async {
        while !Task.isCancelled && !state.withLock({ $0.leaving }) {
            do {
                try await lost.revoke()
                let delegations = try await join()
                if state.withLock({ $0.leaving }) { return await delegations.leave() }
                begin(delegations)
                logger.notice("cluster: joined again")
                return
            } catch {
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Stops answering recalls and gives every delegation back.
    public func leave() async {
        let delegations = state.withLock { state -> Delegations? in
            state.leaving = true
            state.held = [:]
            defer { state.delegations = nil }
            return state.delegations
        }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        await delegations?.leave()
    }

    /// Whether the host is a member now (its lease held).
    public var isMember: Bool { state.withLock { $0.delegations != nil } }

    /// This run's delegations, while the host is a member.
    var currentDelegations: Delegations? { state.withLock { $0.delegations } }

    // MARK: Granting

    /// Whether this host may grant `mode` on `path` ("" the root) now: it holds a delegation of
    /// the item or a directory above it that is not being recalled.
    public func covers(_ path: String, _ mode: Delegations.Mode) -> Bool {
        state.withLock { state in
            if state.held.isEmpty { return false }
            if state.held[path]?.serves(mode) == true { return true }
            var directory = Substring(path)
            while !directory.isEmpty {
                directory = directory.lastIndex(of: "/").map { directory[..<$0] } ?? ""
                if state.held[String(directory)]?.serves(mode) == true { return true }
            }
            return false
        }
    }

    /// Waits until `covers(path, mode)` held at the moment the delegation was granted (a recall
    /// may end it again at once: the caller asks `covers` after it has taken what it needs).
    public func acquire(_ path: String, _ mode: Delegations.Mode) async throws(Delegations.Failure) {
        try await acquire(path, mode, exactly: false)
    }

    /// `exactly`: of the item itself, not of a directory above it.
    private func acquire(_ path: String, _ mode: Delegations.Mode, exactly: Bool) async throws(Delegations.Failure) {
        if covers(path, mode) { return }
        let task = state.withLock { current -> Task<Void, Error>? in
            guard let delegations = current.delegations else { return nil }
            let key = Key(path: exactly ? path : delegationPath(for: path, mode, in: delegations, avoiding: current.recalled), mode: mode)
            if let under = current.acquiring[key] { return under }
            let task = Task<Void, Error> { [self] in
                defer { state.withLock { _ = $0.acquiring.removeValue(forKey: key) } }
                // A directory asked for on what the replica knew: if another host's key is in
                // its way after all, the item alone is asked for instead.
                if key.path != path, try await delegations.acquireUnlessBlocked(key.path, key.mode) == nil {
                    return try await acquire(path, mode, exactly: true)
                }
                if key.path == path { _ = try await delegations.acquire(key.path, key.mode) }
                state.withLock { state in
                    // Recalled as soon as granted: given back already, or about to be. Of a run
                    // that has ended: nothing.
                    if state.recalled[key] == nil && state.delegations === delegations {
                        state.held[key.path, default: []].insert(Modes(key.mode))
                    }
                }
            }
            current.acquiring[key] = task
            return task
        }
        guard let task else { throw .leaseLost }
        do { try await task.value } catch let failure as Delegations.Failure { throw failure } catch { throw .leaseLost }
    }

    /// The delegation to ask for `path`: its outermost directory (or itself) in which and
    /// above which no other host has a key that conflicts; `path` itself when there is none.
    /// Never a key of this host being recalled.
    private func delegationPath(for path: String, _ mode: Delegations.Mode, in delegations: Delegations,
                                avoiding recalled: [Key: [Delegations.Entry]]) -> String {
        if path.isEmpty { return path }
        let others = delegations.entries().filter { !($0.host == delegations.host && $0.lease == delegations.lease.id) }
        let directories = path.indices.filter { path[$0] == "/" }.map { String(path[..<$0]) }
        for candidate in directories {
            let wanted = Delegations.Entry(path: candidate, host: delegations.host, mode: mode, revision: .max, lease: delegations.lease.id)
            if recalled[Key(path: candidate, mode: mode)] == nil && !others.contains(where: { Delegations.conflict($0, wanted) }) {
                return candidate
            }
        }
        return path
    }

    // MARK: Recalls

    private func recalled(_ recall: Delegations.Recall, in delegations: Delegations) {
        let key = Key(path: recall.held.path, mode: recall.held.mode)
        let first = state.withLock { state -> Bool in
            guard state.delegations === delegations else { return false }
            let first = state.recalled[key] == nil
            state.recalled[key, default: []].append(recall.wanted)
            if var modes = state.held[key.path] {
                modes.remove(Modes(key.mode))
                state.held[key.path] = modes.isEmpty ? nil : modes
            }
            return first
        }
        if first { Task { [self] in await giveBack(key, of: delegations) } }
    }

    /// Serves the recalls of `key` and gives it back.
    private func giveBack(_ key: Key, of delegations: Delegations) async {
        let deadline = ContinuousClock.now + breakTime
        var begun: [LocalAccess] = []
        var told: Set<Int64> = []
        var broken = false
        while true {
            // The other hosts' keys that still want it: one taken back (a host that asked for
            // a whole directory and narrowed its request), or whose host's lease ended, does not.
            let wanted = state.withLock { state -> [Delegations.Entry]? in
                guard state.delegations === delegations else { return [] }
                let wanted = (state.recalled[key] ?? []).filter { delegations.isPresent($0) }
                if wanted.isEmpty {
                    state.recalled[key] = nil
                    state.held[key.path, default: []].insert(Modes(key.mode))
                    return nil
                }
                state.recalled[key] = wanted
                return wanted
            }
            guard let wanted else {
                for access in begun { access.end() }
                return      // kept
            }
            for other in wanted where told.insert(other.revision).inserted {
                begun.append(local.beginAccess(for: other.host, other.path, other.mode))
            }
            if delegations.lease.isLost { break }
            let holders = local.holders().map { Delegations.Entry(path: $0.path, host: "", mode: $0.mode, revision: 0, lease: 0) }
            let conflicting = holders.filter { holder in wanted.contains { Delegations.conflict(holder, $0) } }
            let pastDeadline = ContinuousClock.now >= deadline
            if conflicting.isEmpty || pastDeadline {
                if !conflicting.isEmpty && !broken {
                    broken = true
                    logger.warning("cluster: recall of \(key.mode == .write ? "write" : "read") \(key.path.isEmpty ? "/" : key.path) by \(Set(wanted.map(\.host)).sorted().joined(separator: ", ")) broken after the break time: \(conflicting.count) holder(s) here still hold")
                }
                // Holders that go on need delegations of their own before this one goes.
                let recalledEntry = Delegations.Entry(path: key.path, host: "", mode: key.mode, revision: 0, lease: 0)
                let uncovered = holders.filter { holder in
                    !conflicting.contains(holder) && Delegations.contains(recalledEntry.path, holder.path, orIs: true)
                        && !covers(holder.path, holder.mode)
                }
                if uncovered.isEmpty { break }
                for holder in uncovered {
                    Task { [self] in try? await acquire(holder.path, holder.mode) }
                }
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        if !delegations.lease.isLost { do { try await delegations.release(key.path, key.mode) } catch {
            logger.error("cluster: cannot give back \(key.path.isEmpty ? "/" : key.path): \(error)")
        } }
        state.withLock { state in
            if state.delegations === delegations { state.recalled[key] = nil }
        }
        for access in begun { access.end() }
    }
}

extension Delegations {
    /// `contains`, or the same item.
    static func contains(_ outer: String, _ inner: String, orIs same: Bool) -> Bool {
        (same && outer == inner) || contains(outer, inner)
    }
}
