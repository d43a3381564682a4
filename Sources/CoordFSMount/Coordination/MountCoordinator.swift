import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables lock themselves; `delegations` is set before the session runs.
/// The one owner of the mount's coordination. A handler names the items of a kernel request
/// (`ItemIntent`); the coordinator takes them for the calling process — through a quiet gate,
/// at once, inside one of the process's own accessors, or after a wait it watches (`WaitWatch`)
/// and the kernel may interrupt — and runs the handler with what it holds: a `MountClaim`,
/// which the handler must end. On a host of a shared store the request first needs its
/// host's delegations (`MountCoordinator+Cluster.swift`).
///
/// Requests of the kernel's own threads are not coordinated: they finish what a coordinated
/// open started (with the writeback cache, the flusher writes pages and file times back).
/// Making the flusher wait for the open's holder would stall writeback for the whole mount,
/// and with it every writer throttled on dirty pages.
final class MountCoordinator: @unchecked Sendable {
    let domain: CoordinationDomain
    /// `domain.engine`, held directly: reached through the domain, the compiler retained and
    /// released it around every grant and release.
    let engine: CoordinationEngine
    let configuration: MountConfiguration
    /// How the mount's items are named to the engine.
    let targets: ItemTargets
    let statistics: MountStatistics
    let logger = Logger(label: "org.coordfs.mount")
    /// Shut for the names of the files held open under gated grants.
    let nameGates = NameGates()
    /// Requests waiting, by the number the kernel's interrupt names them with.
    let waitingRequests = WaitingRequests()
    /// Waiting requests whose wait must end early: under a kernel lock, for a settled file,
    /// past the break time.
    let waitWatch: WaitWatch
    /// Opens that went ahead by a break, which cover their processes' next calls on their items.
    let brokenOpens = BrokenOpens()
    /// The filesystems under the mount: a request may pass a quiet gate only on the backing's
    /// own, and only where that is local.
    let filesystems: BackingFilesystems
    /// The delegations of a host of a shared store (`--cluster`): set before the session runs.
    var delegations: (any HostDelegations)?
    /// The mount's items as a host of a store shared with other hosts sees them.
    let store: SharedStore
    /// The owner, group and mask items show (`-o uid=,gid=,umask=`), as the kernel checks them:
    /// who else may list or search a directory a request waits under the lock of.
    let ownership: OwnershipSetting

    init(
        domain: CoordinationDomain, configuration: MountConfiguration, targets: ItemTargets,
        statistics: MountStatistics,
        filesystems: BackingFilesystems, waitWatch: WaitWatch, store: SharedStore, ownership: OwnershipSetting
    ) {
        self.domain = domain
        engine = domain.engine
        self.configuration = configuration
        self.targets = targets
        self.statistics = statistics
        self.filesystems = filesystems
        self.waitWatch = waitWatch
        self.store = store
        self.ownership = ownership
        waitWatch.tellBroken = { [domain] paths, grants, accessor in
            domain.tellCoordinationBroken(at: paths, grants: grants, by: accessor)
        }
    }

    /// Takes `wanted` (and `other`, both or none) for the calling process, then runs `body`
    /// with what it holds (a claim of nothing when the request is not coordinated). On refusal
    /// the request is answered with the errno and `body` does not run. An interrupt from the
    /// kernel ends the wait with EINTR.
    ///
    /// `forTheCall`: the request holds its items only while `body` runs (docs/mount.md: a
    /// namespace change, a setattr), not for an open file's life. While the engine holds
    /// nothing, or only files held open by other names, such a request passes a quiet gate
    /// instead: nobody to wait for or to tell (`QuietGate`, `passQuietly`).
    func coordinate(
        _ reply: consuming Reply, _ wanted: ItemIntent, and other: ItemIntent? = nil, nonBlocking: Bool = false,
        forTheCall: Bool = false, _ body: @escaping @Sendable (consuming Reply, consuming MountClaim) -> Void
    ) {
        let request = MountRequest(
            wanted: wanted, other: other, nonBlocking: nonBlocking, forTheCall: forTheCall,
            caller: reply.caller, body: body)
        if let delegations { return coordinateInCluster(reply, request, delegations) }
        take(reply, request)
    }

    /// Takes the request's items, again while they turn out to have moved before they were
    /// held (`movedBeforeHeld`), then runs its body or leaves it waiting.
    func take(_ reply: consuming Reply, _ request: MountRequest) {
        var request = request
        while true {
            switch takeAtOnce(request) {
            case .notCoordinated:
                return request.body(reply, MountClaim(nil, self))
            case .passedQuietly(let passage):
                configuration.whilePassingQuietly?()
                request.body(reply, MountClaim(nil, self))
                return endPassing(passage)
            case .held(let claim, let tellsAfterAnswer):
                guard tellsAfterAnswer else { return request.body(reply, MountClaim(claim, self)) }
                domain.holdNotifications()
                request.body(reply, MountClaim(claim, self))
                return domain.deliverHeldNotifications()
            case .movedBeforeHeld(let stale):
                endUnused(stale, request)
                request.attempt += 1
            case .waits(let waiting):
                return wait(reply, request, waiting)
            }
        }
    }

    /// What taking a request's items at once came to.
    private enum AtOnce {
        /// Nothing to hold: a kernel thread's request, a path the mode leaves alone, an
        /// O_TMPFILE file not linked yet (nobody else can reach it).
        case notCoordinated
        /// Passed a quiet gate, holding nothing: the gate is left after the body.
        case passedQuietly(QuietPassage)
        /// Granted at once, or made inside an accessor; `tellsAfterAnswer`: presenters hear of
        /// it once the body has answered (nobody to tell for a listed grant or an accessor's).
        case held(Claim, tellsAfterAnswer: Bool)
        /// Granted, but for items that had moved since they were named: to be ended unused.
        case movedBeforeHeld(Claim)
        /// To wait, or be refused.
        case waits(Waiting)
    }

    /// A request that could not be granted at once, as the engine will take it.
    struct Waiting {
        var process: Int32
        var intents: [Intent]
        var mode: CoordinationMode
        /// The intents as the mode takes them (`ItemIntent.strict`).
        var wanted: ItemIntent
        var other: ItemIntent?
        var movesSeen: Int
        var began: Int64
    }

    private func takeAtOnce(_ request: MountRequest) -> AtOnce {
        var wanted = request.wanted, other = request.other
        if wanted.name.isEmpty && wanted.node.isUnnamed.load(ordering: .relaxed) { return .notCoordinated }
        let mode = coordinationMode(wanted, other)
        if mode == .off { return .notCoordinated }
        if mode == .strict { (wanted, other) = (wanted.strict, other?.strict) }
        let first = request.attempt == 0
        if request.forTheCall && mayPassQuietly(wanted, other), let passage = passQuietly(wanted, other) {
            if first { statistics.coordinated.add() }
            return .passedQuietly(passage)
        }
        // One clock reading serves the request's caches.
        let now = coarseMilliseconds()
        guard let process = callingProcess(request.caller, now: now) else { return .notCoordinated }
        if first { statistics.coordinated.add() }
        if !domain.accessorHolds.isEmpty, let claim = accessorClaim(of: process, wanted, other, now: now) {
            return .held(claim, tellsAfterAnswer: false)
        }
        // Read before the targets are named: see `movedBeforeHeld`.
        let movesSeen = inodes.placesGeneration.value
        let identity = CoordinatorIdentity.process(process)
        let intents: [Intent]
        if other == nil && mode.holds {
            // Most requests: one item, nothing in the way and nobody to ask. Without an intents
            // array unless the request has to wait. (Only a rename, of two items, reports a move.)
            let (target, place) = targets.targetAndPlace(of: wanted, now: now)
            configuration.afterNamingTargets?()
            if let claim = grantAtOnce(
                Intent(wanted.kind, target), place: place, gated: !request.forTheCall, for: identity)
            {
                if movedBeforeHeld(
                    CollectionOfOne(target.path), wanted, other, since: movesSeen, attempt: request.attempt, now: now)
                {
                    return .movedBeforeHeld(claim)
                }
                return .held(claim, tellsAfterAnswer: !claim.isOnShortList)
            }
            intents = [Intent(wanted.kind, target)]
        } else {
            intents =
                [Intent(wanted.kind, targets.target(of: wanted, now: now))]
                + (other.map { [Intent($0.kind, targets.target(of: $0, now: now))] } ?? [])
            configuration.afterNamingTargets?()
            if let claim = Claim.grantedAtOnce(in: domain, identity: identity, intents: intents, holds: mode.holds) {
                if movedBeforeHeld(
                    intents.lazy.map(\.path), wanted, other, since: movesSeen, attempt: request.attempt, now: now)
                {
                    return .movedBeforeHeld(claim)
                }
                return .held(claim, tellsAfterAnswer: true)
            }
        }
        return .waits(
            Waiting(
                process: process, intents: intents, mode: mode, wanted: wanted, other: other,
                movesSeen: movesSeen, began: now))
    }

    /// The engine's grant of one item at once, if nothing is in its way. An open, a create, a
    /// truncation (`gated`) outside packages shuts its name's gate first: the engine's second
    /// quiet gate stays open for requests about other names (`NameGates`).
    private func grantAtOnce(
        _ intent: Intent, place: (directory: NodeID, name: String)?, gated: Bool,
        for identity: CoordinatorIdentity
    ) -> Claim? {
        guard gated, let place, intent.target.enclosingPackages.isEmpty else {
            return engine.acquireAtOnce(intent, for: identity).map { .single($0) }
        }
        let gate = nameGates.index(of: place.name, in: place.directory)
        nameGates.shut(gate)
        if let grant = engine.acquireAtOnce(intent, for: identity, gated: true) { return .gated(grant, gate: gate) }
        nameGates.open(gate)
        return nil
    }

    /// Ends `stale` unused: its items had moved before it held them.
    func endUnused(_ stale: Claim?, _ request: MountRequest) {
        statistics.takenAgain.add(1, ordering: .relaxed)
        end(stale, outcomes: request.unchanged)
    }

    private var inodes: InodeTable { targets.inodes }

    /// The mode the configuration's rules give the item `wanted` names.
    private func mode(for wanted: ItemIntent) -> CoordinationMode {
        configuration.mode(for: targets.relativePath(wanted.node, wanted.name.isEmpty ? nil : wanted.name))
    }

    /// The mode of a request: its item's, or (when that holds nothing) the other item's.
    func coordinationMode(_ wanted: ItemIntent, _ other: ItemIntent?) -> CoordinationMode {
        var mode = configuration.mode
        if !configuration.modeRules.isEmpty {
            mode = self.mode(for: wanted)
            if let other, !mode.holds {
                let otherMode = self.mode(for: other)
                if otherMode != .off { mode = otherMode }
            }
        }
        return mode
    }

    /// Whether `take` coordinates a request of `caller` about these items at all.
    func isCoordinated(_ wanted: ItemIntent, _ other: ItemIntent?, _ caller: RequestCaller) -> Bool {
        if wanted.name.isEmpty && wanted.node.isUnnamed.load(ordering: .relaxed) { return false }
        if coordinationMode(wanted, other) == .off { return false }
        return callingProcess(caller, now: coarseMilliseconds()) != nil
    }

    /// The claim of a request that `process` makes inside one of its own accessors: a hold it
    /// took through the control socket covers an item the request names (C20, docs/swift.md).
    private func accessorClaim(of process: Int32, _ wanted: ItemIntent, _ other: ItemIntent?, now: Int64) -> Claim? {
        let first = targets.target(of: wanted, now: now)
        let second = other.map { targets.target(of: $0, now: now) }
        let named = second.map { [first, $0] } ?? [first]
        guard let held = domain.accessorHolds.covering(named, of: process) else { return nil }
        var intents = [Intent(wanted.kind, first)]
        if let other, let second { intents.append(Intent(other.kind, second)) }
        return .accessor(held: held.claim, intents: intents)
    }

    /// Whether the items a claim was granted on (`granted`, in the order of `wanted`, `other`)
    /// are no longer where the claim holds them.
    ///
    /// A request names its targets from the inode table, then asks the engine. A rename that
    /// moves an item in between leaves the request holding the name the item has left. A rename
    /// that holds a grant meanwhile makes the request wait and reports the move, which the
    /// waiting request follows (C11); but a rename that passes a quiet gate holds nothing and
    /// reports nothing, and the request's grant merely waits for it to leave the gate (`QuietGate`,
    /// `NameGates`). (Nor does a rename that begins and ends while the request
    /// is between naming and asking, if its thread is preempted there.) So when a node
    /// has moved since the targets were named (`InodeTable.placesGeneration`), they are named
    /// again, and a claim whose targets differ is ended unused and taken again. Once held,
    /// nothing moves its items without waiting for it. (After many attempts, unlikely but not
    /// impossible while others keep moving the same item, the claim is kept as granted.)
    func movedBeforeHeld<Paths: Collection<ItemPath>>(
        _ granted: Paths, _ wanted: ItemIntent, _ other: ItemIntent?,
        since seen: Int, attempt: Int, now: Int64
    ) -> Bool {
        guard attempt < 64, inodes.placesGeneration.value != seen else { return false }
        var paths = granted.makeIterator()
        if paths.next() != targets.target(of: wanted, now: now).path { return true }
        if let other, paths.next() != targets.target(of: other, now: now).path { return true }
        return false
    }

    /// The kernel interrupted a waiting request (possibly before its claim was registered).
    func interrupt(_ number: UInt) { waitingRequests.interrupt(number) }

    /// The thread group of the calling thread: the process is the coordinator — or, when it
    /// descends from a process whose holds are inherited (`coordfs coordinate`), that process.
    /// Nil for a kernel thread.
    func callingProcess(_ request: RequestCaller, now: Int64) -> Int32? {
        let caller = ProcessInfoCache.caller(of: request.thread, now: now)
        if caller.isKernelThread { return nil }
        let process = caller.process
        guard domain.hasInheritingProcesses else { return process }
        let inheriting = domain.inheritingProcesses
        var current = process
        for _ in 0..<32 {
            if inheriting.contains(current) { return current }
            guard let parent = ProcessInfoCache.parent(of: current, now: now), parent > 1 else { break }
            current = parent
        }
        return process
    }
}

/// A kernel request's coordination as `MountCoordinator.take` takes it, and takes it again.
struct MountRequest: Sendable {
    let wanted: ItemIntent
    let other: ItemIntent?
    let nonBlocking: Bool
    let forTheCall: Bool
    /// Who asks (the reply's caller).
    let caller: RequestCaller
    let body: @Sendable (consuming Reply, consuming MountClaim) -> Void
    /// How many times its items turned out to have moved before they were held.
    var attempt = 0

    /// An open of an item the kernel names by its node (not a create, nor a truncation, which
    /// the kernel holds the inode locked for, nor a call on a file open already).
    var isOpen: Bool { !forTheCall && wanted.name.isEmpty && !wanted.inodeLocked }

    /// The outcomes of a claim of its items given back unused: nothing changed.
    var unchanged: [IntentOutcome] {
        let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
        return other == nil ? [unchanged] : [unchanged, unchanged]
    }
}
