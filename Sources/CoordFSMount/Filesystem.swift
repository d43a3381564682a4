import LinuxSystem
import CLinux
import CFusePassthrough
import Coordination
import CoordinationServer
import CoordinationRuntime
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables lock themselves; the rest is set before the session runs.
/// The passthrough filesystem: serves the backing directory and turns opens, creations, renames
/// and deletions into coordinated intents of the calling process (SPEC §3). Handlers are
/// grouped by family in `Filesystem+*.swift`; the C trampolines are all in `FuseBridge.swift`.
public final class Filesystem: @unchecked Sendable {
    public let configuration: MountConfiguration
    public let domain: CoordinationDomain
    /// `domain.engine`, held directly: reached through the domain, the compiler retained and
    /// released it around every grant and release.
    let engine: CoordinationEngine
    let inodes: InodeTable
    let files: OpenFileTable
    /// Kernel passthrough of open files; nil when the configuration does not use it.
    let passthrough: KernelPassthrough?
    /// The mount point as the engine names items: presenters see paths under it.
    let mountRoot: ItemPath
    let logger = Logger(label: "org.coordfs.mount")
    /// Waiting claims by number, for FUSE interrupts.
    private let waiting = Mutex<(claims: [UInt: CoordinatedAccess], interruptedEarly: Set<UInt>)>(([:], []))
    private let nextWaiting = Atomic<UInt>(1)
    /// Lines logged for requests that gave up, in the current second (`logGivingUp`).
    private let givingUpLogged = Mutex<(second: Int64, count: Int)>((0, 0))
    let statistics = MountStatistics()
    /// Waiting requests whose wait must end early: under a kernel lock, for a settled file,
    /// past the break time (`WaitWatch`).
    let waitWatch: WaitWatch
    /// Shut for the names of the files held open under gated grants (`NameGates`).
    let nameGates = NameGates()
    /// The FUSE session once mounted: its io_uring queues serve it, named by its descriptor.
    let session = Atomic<UnsafeMutableRawPointer?>(nil)
    let packageMarkers: PackageMarkers
    let directoryContexts = DirectoryContexts()
    /// Created items are given to the caller (we can only when running as root).
    let givesOwnership = geteuid() == 0
    /// The filesystems under the mount, the backing's own and those mounted inside it.
    let filesystems: BackingFilesystems
    /// `-o noatime` for the backing files.
    let accessTimes: AccessTimes
    /// `configuration.isDirsync` and `isSynchronous`, read once: every change of names asks
    /// (`Filesystem+Synchronous.swift`).
    let syncsNames: Bool
    let isSynchronous: Bool
    /// The backing directory on its own mount, held while a `noatime` mount reads a private
    /// copy of it (`AccessTimes.openBacking`); -1 otherwise.
    private let backingPin: Int32
    /// Requests about items on a filesystem that is not local, mounted inside the (local)
    /// backing directory, go to the io_uring lanes (`laneRequests`).
    let lanesByItem: Bool
    /// The nice value libfuse's workers run at (`MountSession.run`).
    let workerNice = Atomic<Int32>(0)
    /// The process's open-file limit, raised to the hard limit at mount (`DescriptorLimit`).
    let openFileLimit: Int
    /// The control socket's path, answered as `user.coordfs.socket` on every item.
    var socketPath: String? {
        get { socket.withLock { $0 } }
        set { socket.withLock { $0 = newValue } }
    }
    private let socket = Mutex<String?>(nil)

    /// Opens the backing directory; the mount point must be canonical.
    public init(configuration: MountConfiguration, domain: CoordinationDomain) throws {
        self.configuration = configuration
        self.domain = domain
        engine = domain.engine
        ownership = OwnershipSetting(configuration.ownershipView)
        guard let root = ItemPath(configuration.mountPoint) else {
            throw MountError.invalid("mount point '\(configuration.mountPoint)' is not an absolute path")
        }
        mountRoot = root
        packageMarkers = PackageMarkers(lifetimeMilliseconds: Int64(configuration.cacheTimeout * 1000))
        passthrough = configuration.kernelPassthrough && !configuration.writebackCache ? KernelPassthrough() : nil
        syncsNames = configuration.isDirsync
        isSynchronous = configuration.isSynchronous
        // (`self.logger` cannot be reached before every property is set.)
        let (fd, pin, accessTimes) = AccessTimes.openBacking(configuration) {
            Logger(label: "org.coordfs.mount").notice("\($0)")
        }
        guard fd >= 0 else { throw MountError.invalid("cannot open backing directory '\(configuration.backing)': \(Errno.current)") }
        (backingPin, self.accessTimes) = (pin, accessTimes)
        var info = stat()
        guard fstatat(fd, "", &info, CFS_AT_EMPTY_PATH) == 0 else {
            for open in [fd, pin] where open >= 0 { close(open) }
            throw MountError.invalid("cannot stat backing directory '\(configuration.backing)'")
        }
        let limit = DescriptorLimit.raise()
        openFileLimit = limit
        guard let budget = DescriptorLimit.budget(configuration.descriptorBudget, under: limit) else {
            for open in [fd, pin] where open >= 0 { close(open) }
            throw MountError.invalid(DescriptorLimit.refusal(of: "a descriptor budget of \(configuration.descriptorBudget ?? 0)", under: limit))
        }
        // Room for the budget and the files open through the mount, within the limit.
        DescriptorLimit.reserveTable(for: min(limit, budget + budget / 4 + 256), duplicating: fd)
        inodes = InodeTable(rootFD: fd, rootStat: info, descriptorBudget: budget, fileHandles: configuration.fileHandles)
        let perUser = configuration.openFilesPerUser ?? DescriptorLimit.openFilesPerUser(under: limit, inodeBudget: budget)
        files = OpenFileTable(budget: OpenFileBudget(perUser: perUser, owner: getuid()))
        filesystems = BackingFilesystems(rootFD: fd, rootDevice: UInt64(info.st_dev))
        lanesByItem = configuration.ioUring && configuration.ringLanes == .auto && filesystems.rootIsLocal
        let table = inodes
        waitWatch = WaitWatch(logger: Logger(label: "org.coordfs.mount"), settleTime: configuration.settleTime,
                              breakTime: configuration.breakTime) { node, name in
            table.withFD(node, orElse: { _ in nil }) { fd -> WaitWatch.FileState? in
                var info = stat()
                let found = name.isEmpty ? fstat(fd, &info) : FileSystemName.withCString(name) { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }
                return found == 0 ? WaitWatch.FileState(modified: info.st_mtim, changed: info.st_ctim) : nil
            }
        }
        waitWatch.tellBroken = { [domain] path, holders, accessor in
            domain.tellCoordinationBroken(at: path, holders: holders, by: accessor)
        }
    }

    deinit {
        if backingPin >= 0 { close(backingPin) }
    }

    /// The io_uring queues hand every request to their lane threads (`RingLanes`): the backing
    /// directory's filesystem is not local (with `auto`), or the configuration says so.
    var lanesAll: Bool {
        switch configuration.ringLanes {
        case .auto: !filesystems.rootIsLocal
        case .all: true
        case .blocking: false
        }
    }

    /// Whether close(2) of an open of `inode` can go without a FLUSH to the daemon: its
    /// backing file is on the backing directory's own filesystem, and that filesystem reports
    /// nothing at close. Flushing is then only a dup and a close of the backing descriptor, not
    /// worth a round trip to the daemon. (The writeback cache still flushes its dirty pages: the
    /// kernel sends FLUSH then regardless.)
    func sendsNoFlush(_ inode: Inode) -> Bool {
        filesystems.rootReportsNothingAtClose && inode.device == filesystems.rootDevice
    }

    var timeout: Double { configuration.cacheTimeout }

    /// The owner, group and mask every item shows (`-o uid=,gid=,umask=`), as a remount left them.
    let ownership: OwnershipSetting

    /// Attributes as the mount shows them.
    @inline(__always)
    func shown(_ info: stat) -> stat { ownership.shown(info) }

    /// `mount -o remount,OPTIONS`: `uid=`, `gid=` and `umask=` change at once (the kernel is
    /// told to forget the attributes it keeps); any other option must be as the mount has it
    /// (`ro` and `rw` are the kernel's, which the helper asks of it). Nil when done, or why not.
    func remount(_ options: [String]) -> String? {
        var rest = options
        let given: OwnershipView
        do { given = try OwnershipView.take(from: &rest) } catch { return "\(error)" }
        let fixed = rest.filter { !Self.passesRemount($0) && !configuration.fuseOptions.contains($0) }
        if !fixed.isEmpty {
            return "\(fixed.joined(separator: ",")) cannot change while mounted: unmount and mount again"
        }
        var view = ownership.current
        if let owner = given.owner { view.owner = owner }
        if let group = given.group { view.group = group }
        if let umask = given.umask { view.umask = umask }
        guard view != ownership.current else { return nil }
        ownership.set(view)
        for node in inodes.knownNodes { invalidateAttributes(of: node) }
        logger.notice("remounted: owner \(view.owner.map(String.init) ?? "as stored"), group \(view.group.map(String.init) ?? "as stored"), umask \(view.umask.map { String($0, radix: 8) } ?? "none")")
        return nil
    }

    /// Options a remount may name whatever the mount has: the request itself, `ro` and `rw`,
    /// and what mount(8) reads back from the kernel's table of the mount (its flags, and FUSE's
    /// own options). (mount(8)'s own the helper keeps to itself: `Mount.mountHelperOptions`.)
    static func passesRemount(_ option: String) -> Bool {
        let name = option.split(separator: "=", maxSplits: 1).first.map(String.init) ?? option
        return ["remount", "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "relatime", "strictatime", "lazytime",
                "nolazytime", "default_permissions", "user_id", "group_id", "rootmode", "fd", "fsname", "subtype",
                "blksize"].contains(name)
    }

    // MARK: Paths and intents

    /// The path of `name` in `parent` (or of `parent` itself) below the mount root.
    func relativePath(_ parent: Inode, _ name: String? = nil) -> String {
        inodes.path(of: parent.id, appending: name)
    }

    /// Where a path of the mount's items, spelled from `/`, goes on below the mount root.
    private var relativeStart: Int { mountRoot.isRoot ? 1 : mountRoot.string.utf8.count + 1 }

    /// The engine's facts for an item of the mount: directory or not, and the packages around it.
    func target(_ path: ItemPath, isDirectory: Bool) -> AccessTarget {
        guard path != mountRoot else { return AccessTarget(path: path, isDirectory: true) }
        // Its directories below the mount root, outermost first, each spelled from the root:
        // the packages among them enclose the item.
        var packages: [ItemPath] = []
        let start = relativeStart
        let itemIsPackage = path.string.withBorrowedUTF8 { bytes -> Bool in
            let relative = UnsafeBufferPointer(rebasing: bytes[start...])
            for (offset, byte) in relative.enumerated() where byte == UInt8(ascii: "/") {
                let directory = String(decoding: UnsafeBufferPointer(rebasing: relative[..<offset]), as: UTF8.self)
                if isPackage(directory) {
                    packages.append(ItemPath(canonical: String(decoding: UnsafeBufferPointer(rebasing: bytes[..<(start + offset)]), as: UTF8.self)))
                }
            }
            return isDirectory && isPackage(String(decoding: relative, as: UTF8.self))
        }
        return AccessTarget(path: path, isDirectory: isDirectory, isPackage: itemIsPackage, enclosingPackages: packages)
    }

    /// Whether the directory at `path`, below the mount root, is a file package.
    func isPackage(directoryAt path: ItemPath) -> Bool {
        guard path != mountRoot else { return false }
        let start = relativeStart
        return isPackage(path.string.withBorrowedUTF8 { String(decoding: UnsafeBufferPointer(rebasing: $0[start...]), as: UTF8.self) })
    }

    private func isPackage(_ relative: String) -> Bool {
        if !configuration.packageExtensions.isEmpty, let dot = relative.utf8.lastIndex(of: UInt8(ascii: ".")),
           configuration.packageExtensions.contains(String(relative[relative.index(after: dot)...])) {
            return true
        }
        return packageMarkers.isMarked(relative) {
            FileSystemName.withCString(relative + "/" + ItemLocatorMarker.name) { faccessat(inodes.rootDescriptor, $0, F_OK, AT_SYMLINK_NOFOLLOW) } == 0
        }
    }

    /// After a change of the namespace through the mount: which directories are packages may
    /// have changed when a marker or a directory came or went.
    func namespaceChanged(name: String, directory: Bool) {
        if directory || name == ItemLocatorMarker.name { packageMarkers.forgetAll() }
    }

    /// `namespaceChanged` for a rename's two names.
    func namespaceChanged(name: String, _ other: String, directory: Bool) {
        namespaceChanged(name: name, directory: directory || other == ItemLocatorMarker.name)
    }

    /// One intent of a kernel request: an access of an item, named by its node, or by the
    /// directory that holds it and its name there (the engine's `Intent` before its path is
    /// spelled out).
    struct ItemIntent {
        var kind: AccessKind
        /// The item itself, or the directory that holds `name`.
        var node: Inode
        /// Empty for `node` itself: the kernel never names an item so. Not an optional: copying
        /// a `String?` runs the optional's value witnesses, some ten cache lines of code.
        var name: String = ""
        var isDirectory: Bool
    }

    /// The mode the configuration's rules give the item `wanted` names.
    private func mode(for wanted: ItemIntent) -> CoordinationMode {
        configuration.mode(for: relativePath(wanted.node, wanted.name.isEmpty ? nil : wanted.name))
    }

    /// Takes `wanted` (and `other`, both or none) for the calling process, then runs `body`
    /// with what it holds (nil when the path is not coordinated). On refusal the request is
    /// answered with the errno and `body` does not run. An interrupt from the kernel ends the
    /// wait with EINTR.
    ///
    /// Requests of the kernel's own threads are not coordinated: they finish what a coordinated
    /// open started (with the writeback cache, the flusher writes pages and file times back).
    /// Making the flusher wait for the open's holder would stall writeback for the whole mount,
    /// and with it every writer throttled on dirty pages.
    ///
    /// `forTheCall`: the request holds its items only while `body` runs (SPEC §3: a namespace
    /// change, a setattr), not for an open file's life. While the engine holds nothing, or only
    /// files held open by other names, such a request passes a quiet gate instead: nobody to
    /// wait for or to tell (`QuietGate`, `passQuietly`).
    func coordinate(_ reply: Reply, _ wanted: ItemIntent, and other: ItemIntent? = nil, nonBlocking: Bool = false,
                    forTheCall: Bool = false, _ body: @escaping @Sendable (Claim?) -> Void) {
        coordinate(reply, wanted, and: other, nonBlocking: nonBlocking, forTheCall: forTheCall, attempt: 0, body)
    }

    /// `coordinate`, taken again (`attempt` > 0) when what it held had moved before it held it.
    private func coordinate(_ reply: Reply, _ wanted: ItemIntent, and other: ItemIntent?, nonBlocking: Bool,
                            forTheCall: Bool, attempt: Int, _ body: @escaping @Sendable (Claim?) -> Void) {
        // An O_TMPFILE file not linked yet: nobody else can reach it (`tmpfile`).
        if wanted.name.isEmpty && wanted.node.isUnnamed.load(ordering: .relaxed) { return body(nil) }
        var mode = configuration.mode
        if !configuration.modeRules.isEmpty {
            mode = self.mode(for: wanted)
            if let other, !mode.holds {
                let otherMode = self.mode(for: other)
                if otherMode != .off { mode = otherMode }
            }
        }
        if mode == .off { return body(nil) }
        var strictened = wanted
        if mode == .strict, case .writing(let options) = wanted.kind, !options.isDisjoint(with: [.appendingOnly, .sharingWriters]) {
            strictened.kind = .writing([])     // every writer excludes every other open
        }
        let wanted = strictened
        if forTheCall && mayPassQuietly(wanted, other), let passage = passQuietly(wanted, other) {
            if attempt == 0 { statistics.coordinated.add() }
            body(nil)
            return endPassing(passage)
        }
        // One clock reading serves the request's caches.
        let now = coarseMilliseconds()
        guard let process = callingProcess(reply.caller, now: now) else { return body(nil) }
        let identity = CoordinatorIdentity.process(process)
        if attempt == 0 { statistics.coordinated.add() }
        if !domain.accessorHolds.isEmpty, let claim = accessorClaim(of: process, wanted, other, now: now) {
            return body(claim)
        }
        // Read before the targets are named: see `movedBeforeHeld`.
        let movesSeen = inodes.placesGeneration.value
        let intents: [Intent]
        if other == nil && mode.holds {
            // Most requests: one item, nothing in the way and nobody to ask. Without an intents
            // array unless the request has to wait. (Only a rename, of two items, reports a move.)
            // The engine keeps the intent it is given; one that waits is made again.
            let (target, place) = targetAndPlace(of: wanted, now: now)
            configuration.afterNamingTargets?()
            var claim: Claim?
            if !forTheCall, let place, target.enclosingPackages.isEmpty {
                // An open, a create, a truncation: gated, it leaves the engine's second quiet
                // gate open for requests about other names (`NameGates`).
                let gate = nameGates.index(of: place.name, in: place.directory)
                nameGates.shut(gate)
                if let grant = engine.acquireAtOnce(Intent(wanted.kind, target), for: identity, gated: true) {
                    claim = .gated(grant, gate: gate)
                } else {
                    nameGates.open(gate)
                }
            } else if let grant = engine.acquireAtOnce(Intent(wanted.kind, target), for: identity) {
                claim = .single(grant)
            }
            if let claim {
                if movedBeforeHeld(CollectionOfOne(target.path), wanted, other, since: movesSeen, attempt: attempt, now: now) {
                    return coordinateAgain(claim, reply, wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                // `notifyingPresentersAfter`, inline: a listed claim holds nothing back.
                if claim.isOnShortList { return body(claim) }
                domain.holdNotifications()
                body(claim)
                return domain.deliverHeldNotifications()
            }
            intents = [Intent(wanted.kind, target)]
        } else {
            intents = if let other {
                [Intent(wanted.kind, target(of: wanted, now: now)), Intent(other.kind, target(of: other, now: now))]
            } else {
                [Intent(wanted.kind, target(of: wanted, now: now))]
            }
            configuration.afterNamingTargets?()
            if let claim = Claim.grantedAtOnce(in: domain, identity: identity, intents: intents, holds: mode.holds) {
                if movedBeforeHeld(intents.lazy.map(\.path), wanted, other, since: movesSeen, attempt: attempt, now: now) {
                    return coordinateAgain(claim, reply, wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                domain.holdNotifications()
                body(claim)
                return domain.deliverHeldNotifications()
            }
        }
        let number = nextWaiting.wrappingAdd(1, ordering: .relaxed).oldValue
        // A request about a name waits with its directory locked by the kernel; a setattr, its
        // inode: holders that need them must not wait for it in turn.
        let underKernelLock = forTheCall || !wanted.name.isEmpty
        let watched = waitWatch.watches(underKernelLock: underKernelLock)
        // Registered before the claim starts: the claim may be granted (and answered) at once.
        reply.onInterrupt(number)
        // The completion runs on the thread that ended the wait: most often the one serving
        // the holder's RELEASE, which the kernel sends without waiting for its answer (close(2)
        // has returned), so the waiter is served there at once instead of after a hand-off to
        // another thread; a timeout's or an interrupt's, on the thread that noticed it.
        let access = Claim.beginWaiting(in: domain, identity: identity, intents: intents, waits: !nonBlocking,
                                        holds: mode.holds, timeout: configuration.waitTimeout) { [self] result in
            waiting.withLock { _ = $0.claims.removeValue(forKey: number) }
            if watched { waitWatch.forget(number) }
            switch result {
            case .success(let claim):
                // The paths as granted: moves reported while it waited are followed (C11).
                if movedBeforeHeld(claim.intents.lazy.map(\.path), wanted, other, since: movesSeen, attempt: attempt,
                                   now: coarseMilliseconds()) {
                    return coordinateAgain(claim, reply, wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                domain.deliveringAfter { body(claim) }
            case .failure(let error):
                let failure = Errno.from(coordination: error)
                statistics.count(failure)
                reply.error(failure)
                if case .timedOut? = error as? FileCoordinationError { logGivingUp(process, intents) }
            }
        }
        var interrupted = false
        guard access.ifUnsettled({
            interrupted = waiting.withLock { state -> Bool in
                state.claims[number] = access
                return state.interruptedEarly.remove(number) != nil
            }
            if watched {
                waitWatch.watch(number, access, underKernelLock: underKernelLock, uid: reply.caller.uid,
                                item: mode == .strict ? nil : (wanted.node, wanted.name))   // strict: no settling
            }
        }) else { return }
        statistics.waited.add(1, ordering: .relaxed)
        if interrupted { access.cancel() }
    }

    /// A request that gave up waiting (EBUSY) says in the log who it waited for: what a user
    /// whose program failed asks next. Read after the fact from those holding its items now.
    /// At most ten lines a second: waiters giving up together, or a user who makes them, must
    /// not flood the log (or cost a snapshot of the engine each).
    private func logGivingUp(_ process: Int32, _ intents: [Intent]) {
        let second = coarseMilliseconds() / 1000
        let logged = givingUpLogged.withLock { state -> Bool in
            if state.second != second { state = (second, 0) }
            state.count += 1
            return state.count <= 10
        }
        guard logged else { return }
        func who(_ identity: CoordinatorIdentity) -> String {
            guard let pid = identity.process else { return "\(identity)" }
            return "pid \(pid)" + (ProcFile.command(of: pid).map { " (\($0))" } ?? "")
        }
        let paths = Set(intents.map(\.path))
        let holders = engine.snapshot().holders.flatMap { holder in
            holder.intents.filter { intent in paths.contains { $0 == intent.path || $0.isAncestor(of: intent.path) || intent.path.isAncestor(of: $0) } }
                .map { "\($0.path) held for \($0.kind.isWrite ? "write" : "read") by \(who(holder.identity))" }
        }
        let waited = configuration.waitTimeout.map { " after \($0)" } ?? ""
        let wanted = intents.map { "\($0.kind.isWrite ? "write" : "read") of \($0.path)" }.joined(separator: ", ")
        let line = "\(who(.process(process))) gave up (EBUSY)\(waited) on \(wanted): "
            + (holders.isEmpty ? "nobody holds it any more" : holders.joined(separator: "; "))
        logger.notice("\(line)")
    }

    /// The claim of a request that `process` makes inside one of its own accessors: a hold it
    /// took through the control socket covers an item the request names (SPEC §1).
    private func accessorClaim(of process: Int32, _ wanted: ItemIntent, _ other: ItemIntent?, now: Int64) -> Claim? {
        let first = target(of: wanted, now: now)
        let second = other.map { target(of: $0, now: now) }
        let targets = second.map { [first, $0] } ?? [first]
        guard let held = domain.accessorHolds.covering(targets, of: process) else { return nil }
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
    /// Ends `stale` unused and coordinates the request again (`movedBeforeHeld`).
    private func coordinateAgain(_ stale: Claim, _ reply: Reply, _ wanted: ItemIntent, _ other: ItemIntent?, _ nonBlocking: Bool,
                           _ forTheCall: Bool, _ attempt: Int, _ body: @escaping @Sendable (Claim?) -> Void) {
        statistics.takenAgain.add(1, ordering: .relaxed)
        let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
        end(stale, outcomes: other == nil ? [unchanged] : [unchanged, unchanged])
        coordinate(reply, wanted, and: other, nonBlocking: nonBlocking, forTheCall: forTheCall, attempt: attempt + 1, body)
    }

    private func movedBeforeHeld<Paths: Collection<ItemPath>>(_ granted: Paths, _ wanted: ItemIntent, _ other: ItemIntent?,
                                                             since seen: Int, attempt: Int, now: Int64) -> Bool {
        guard attempt < 64, inodes.placesGeneration.value != seen else { return false }
        var paths = granted.makeIterator()
        if paths.next() != target(of: wanted, now: now).path { return true }
        if let other, paths.next() != target(of: other, now: now).path { return true }
        return false
    }

    /// Whether a request for the call may pass the quiet gate: its items lie on the backing's
    /// own filesystem, and that is local. Whoever closes the gate waits for the requests that
    /// passed; one on a network filesystem could keep it waiting as long as its server takes.
    private func mayPassQuietly(_ wanted: ItemIntent, _ other: ItemIntent?) -> Bool {
        filesystems.rootIsLocal && wanted.node.device == filesystems.rootDevice
            && (other.map { $0.node.device == filesystems.rootDevice } ?? true)
    }

    /// The kernel interrupted a waiting request (possibly before its claim was registered).
    func interrupt(_ number: UInt) {
        let claim = waiting.withLock { state -> CoordinatedAccess? in
            if let claim = state.claims[number] { return claim }
            state.interruptedEarly.insert(number)
            return nil
        }
        claim?.cancel()
    }

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

    /// Gives the item `name` created in `parent` for the caller to the caller (the daemon runs
    /// as root). `mode`: the mode the caller asked for; when it has setuid or setgid, the bits
    /// the chown clears and the caller keeps are given back (`keptPrivilegeBits`) to the mode
    /// the file was made with (the umask or a default ACL applied).
    func giveToCaller(_ caller: RequestCaller, parent: Inode, name: String, mode: mode_t = 0) {
        giveToCaller(caller, parent: parent) { parentFD, uid, gid, group in
            let kept = Self.keptPrivilegeBits(asked: mode, made: {
                var info = stat()
                return FileSystemName.withCString(name, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 ? info : nil
            }, group: group, callerGroup: caller.gid)
            _ = FileSystemName.withCString(name) { fchownat(parentFD, $0, uid, gid, AT_SYMLINK_NOFOLLOW) }
            if let kept { _ = FileSystemName.withCString(name) { fchmodat(parentFD, $0, kept, 0) } }
        }
    }

    /// Gives an item created in `parent` for the caller to the caller: `chown(parentFD, uid,
    /// gid, group)` changes its owner, gid_t.max keeping the group a setgid parent gave it
    /// (`group`, the one it ends with). Nothing when the daemon does not run as root or the
    /// caller is root.
    func giveToCaller(_ ctx: RequestCaller, parent: Inode, _ chown: (Int32, uid_t, gid_t, gid_t) -> Void) {
        guard givesOwnership else { return }
        if ctx.uid == 0 && ctx.gid == 0 { return }
        inodes.withFD(parent, orElse: { _ in }) { fd in
            var parentInfo = stat()
            let inheritsGroup = fstatat(fd, "", &parentInfo, CFS_AT_EMPTY_PATH) == 0 && (parentInfo.st_mode & S_ISGID) != 0
            chown(fd, ctx.uid, inheritsGroup ? gid_t.max : ctx.gid, inheritsGroup ? parentInfo.st_gid : ctx.gid)
        }
    }

    /// The mode to give back after a chown of a regular file the caller asked to make with
    /// `asked`, when the chown cleared bits the caller's own create would have kept (nil:
    /// nothing to give back). `made` gives the file's attributes before the chown (asked only
    /// when `asked` has such bits): its mode is the one to keep, the umask or a default ACL
    /// applied. The setuid bit, always (the caller owns the file); the setgid bit when the
    /// file's group is the caller's, as the kernel keeps it (a group it is only a supplementary
    /// member of is not known here, and the bit stays off, as for a non-member).
    static func keptPrivilegeBits(asked: mode_t, made: () -> stat?, group: gid_t, callerGroup: gid_t) -> mode_t? {
        guard asked & (S_ISUID | S_ISGID) != 0, let mode = made()?.st_mode else { return nil }
        guard mode & S_IFMT == 0 || mode & S_IFMT == S_IFREG, mode & (S_ISUID | S_ISGID) != 0 else { return nil }
        var kept = mode & 0o7777
        if group != callerGroup { kept &= ~S_ISGID }
        return kept
    }

    /// Looks up `name` in `parent` on the backing directory and records the node.
    func lookupNode(_ parent: Inode, _ name: String, justMade: Bool = false) throws(Errno) -> (Inode, stat) {
        if justMade {
            // Not known yet: looking for it first would cost a call more. Its siblings' next
            // lookups will find it known.
            if !parent.childrenAreKnown.load(ordering: .relaxed) { parent.childrenAreKnown.store(true, ordering: .relaxed) }
        } else if parent.childrenAreKnown.load(ordering: .relaxed) {
            if let known = try inodes.knownChild(named: name, in: parent) {
                statistics.knownLookups.add(1, ordering: .relaxed)
                return known
            }
            statistics.knownLookupMisses.add(1, ordering: .relaxed)
        }
        let (fd, info) = try inodes.openChild(named: name, in: parent)
        guard lanesByItem else { return (inodes.remember(fd: fd, info: info, in: parent, name: name), info) }
        // Looked at before `remember`, which may close `fd`.
        let filesystem = filesystems.look(atDevice: UInt64(info.st_dev), of: fd)
        let inode = inodes.remember(fd: fd, info: info, in: parent, name: name)
        if !filesystem.isLocal { laneRequests(about: inode, in: parent, firstOnItsFilesystem: filesystem.isNew) }
        return (inode, info)
    }

    /// `inode` lies on a filesystem that is not local, mounted inside a local backing
    /// directory: a request about it may wait on a server, and on a queue thread it would hold
    /// up its CPU's queue. Its requests go to the lanes from now on, and those about the
    /// directory it is mounted in when it is a mount's root (a lookup there crosses into it).
    /// The lookup that found it was served where it came.
    private func laneRequests(about inode: Inode, in parent: Inode, firstOnItsFilesystem: Bool) {
        let device = device
        guard device >= 0 else { return }
        cfs_ring_lane_node(device, inode.id)
        if parent.device != inode.device { cfs_ring_lane_node(device, parent.id) }
        if firstOnItsFilesystem && cfs_ring_facts(device).queues > 0 {
            logger.notice("a filesystem that is not local is mounted at '\(relativePath(inode))': lane threads serve its requests")
        }
    }
}

/// The marker file that makes a directory a file package (as the API's `ItemLocator`).
enum ItemLocatorMarker { static let name = ".coordfs-package" }

/// Why a mount could not be made.
public enum MountError: Error, CustomStringConvertible {
    case invalid(String)
    case fuse(String)

    public var description: String {
        switch self {
        case .invalid(let why), .fuse(let why): return why
        }
    }
}
