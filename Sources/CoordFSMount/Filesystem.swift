import LinuxSystem
import CLinux
import CFusePassthrough
import Coordination
import FileVersions
import CoordinationRuntime
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables lock themselves; the rest is set before the session runs.
/// The passthrough filesystem: serves the backing directory and turns opens, creations, renames
/// and deletions into coordinated intents of the calling process (docs/mount.md). Handlers are
/// grouped by family in `Filesystem+*.swift`; the C trampolines are all in `FuseBridge.swift`.
public final class Filesystem: @unchecked Sendable {
    public let configuration: MountConfiguration
    /// Takes the items of the requests the handlers name, and hands them their claims.
    let coordinator: MountCoordinator
    let inodes: InodeTable
    let files: OpenFileTable
    /// Kernel passthrough of open files; nil when the configuration does not use it.
    let passthrough: KernelPassthrough?
    let statistics: MountStatistics
    /// How long the kernel keeps names and attributes.
    let cacheTimes: KernelCacheTimes
    /// The FUSE session once mounted: its io_uring queues serve it, named by its descriptor.
    let session = Atomic<UnsafeMutableRawPointer?>(nil)
    let backing: BackingDirectory
    /// What is kept of content the mount replaces, and which writes are stale (nil: none).
    let versions: MountVersions?
    /// `sync` and `dirsync`, read once: every change of names asks (`Filesystem+Synchronous.swift`).
    let synchronicity: Synchronicity
    /// The delegations of a host of a shared store (`--cluster`): set before the session runs.
    package var delegations: (any HostDelegations)? {
        get { coordinator.delegations }
        set { coordinator.delegations = newValue }
    }
    /// The flock and fcntl locks the mount serves itself, across the hosts of a shared store
    /// (`serveLocks`, before the session runs); nil: the kernel keeps them, and never asks
    /// (`Filesystem+Locks.swift`).
    var fileLocks: FileLocks?
    /// The mount's items as a host of a store shared with other hosts sees them: the backing
    /// directory, at the mount point.
    package var store: SharedStore { coordinator.store }
    public var domain: CoordinationDomain { coordinator.domain }
    var engine: CoordinationEngine { coordinator.engine }
    /// How the mount's items are named to the engine.
    var targets: ItemTargets { coordinator.targets }
    /// The mount point as the engine names items: presenters see paths under it.
    package var mountRoot: ItemPath { coordinator.targets.root }
    /// What holds through this mount's control socket must pass (`MountCoordinator.claimGate`).
    package var claimGate: (any ClaimGate)? { coordinator.claimGate }
    /// What watches the holds of this mount's control socket while they wait.
    package var socketHoldWaits: any HoldWaitWatch { coordinator.socketHoldWaits }
    /// Whether this mount sees every change to its backing directory itself: its watch covers a
    /// local filesystem, which no other machine mounts, so other hosts' changes come through it.
    public var seesChangesBehind: Bool { watchedDevice != .max }
    var watchedDevice: UInt64 { cacheTimes.watchedDevice }
    var unwatchedTimeout: Double { cacheTimes.unwatchedTimeout }
    var watchedWrites: WatchedWrites { cacheTimes.watchedWrites }
    var filesystems: BackingFilesystems { backing.filesystems }
    var accessTimes: AccessTimes { backing.accessTimes }
    var logger: Logger { Self.logger }
    static let logger = Logger(label: "org.coordfs.mount")
    /// The control socket's path, answered as `user.coordfs.socket` on every item.
    var socketPath: String? {
        get { socket.withLock { $0 } }
        set { socket.withLock { $0 = newValue } }
    }
    private let socket = Mutex<String?>(nil)

    /// Opens the backing directory; the mount point must be canonical.
    public init(configuration: MountConfiguration, domain: CoordinationDomain) throws {
        self.configuration = configuration
        statistics = MountStatistics()
        cacheTimes = KernelCacheTimes(cacheTimeout: configuration.cacheTimeout, statistics: statistics)
        let ownership = OwnershipSetting(configuration.ownershipView)
        self.ownership = ownership
        guard let root = ItemPath(configuration.mountPoint) else {
            throw MountError.invalid("mount point '\(configuration.mountPoint)' is not an absolute path")
        }
        passthrough = configuration.kernelPassthrough && !configuration.writebackCache ? KernelPassthrough() : nil
        synchronicity = Synchronicity(names: configuration.isDirsync, everything: configuration.isSynchronous)
        // (`self.logger` cannot be reached before every property is set.)
        let (fd, pin, accessTimes) = AccessTimes.openBacking(configuration) {
            Logger(label: "org.coordfs.mount").notice("\($0)")
        }
        guard fd >= 0 else {
            throw MountError.invalid(
                "cannot open backing directory '\(configuration.backing)': \(Errno.ofFailedCall())")
        }
        var info = stat()
        guard fstatat(fd, "", &info, CFS_AT_EMPTY_PATH) == 0 else {
            for open in [fd, pin] where open >= 0 { close(open) }
            throw MountError.invalid("cannot stat backing directory '\(configuration.backing)'")
        }
        let limit = DescriptorLimit.raise()
        guard let budget = DescriptorLimit.budget(configuration.descriptorBudget, under: limit) else {
            for open in [fd, pin] where open >= 0 { close(open) }
            throw MountError.invalid(
                DescriptorLimit.refusal(
                    of: "a descriptor budget of \(configuration.descriptorBudget ?? 0)", under: limit))
        }
        // Room for the budget and the files open through the mount, within the limit.
        DescriptorLimit.reserveTable(for: min(limit, budget + budget / 4 + 256), duplicating: fd)
        let pool = DescriptorPool(size: DescriptorLimit.largestBudget(under: limit), inodeCeiling: budget)
        let versions = Self.openVersions(configuration, root: fd)
        self.versions = versions
        inodes = InodeTable(
            rootFD: fd, rootStat: info, descriptorBudget: budget, fileHandles: configuration.fileHandles, pool: pool,
            storeLinks: versions.map { versions -> @Sendable (stat) -> Bool in { versions.store.holdsLink(to: $0) } })
        let perUser =
            configuration.openFilesPerUser ?? DescriptorLimit.openFilesPerUser(under: limit, inodeBudget: budget)
        files = OpenFileTable(budget: OpenFileBudget(perUser: perUser, owner: getuid(), pool: pool))
        let filesystems = BackingFilesystems(rootFD: fd, rootDevice: UInt64(info.st_dev))
        backing = BackingDirectory(
            filesystems: filesystems, accessTimes: accessTimes, pin: pin,
            lanesByItem: configuration.ioUring && configuration.ringLanes == .auto && filesystems.rootIsLocal,
            openFileLimit: limit)
        coordinator = Self.coordinator(
            of: configuration, in: domain, inodes: inodes, root: root, filesystems: filesystems, statistics: statistics,
            ownership: ownership)
    }

    /// The mount's coordinator, naming items from `inodes` below `root` (the mount point).
    private static func coordinator(
        of configuration: MountConfiguration, in domain: CoordinationDomain, inodes: InodeTable, root: ItemPath,
        filesystems: BackingFilesystems, statistics: MountStatistics, ownership: OwnershipSetting
    ) -> MountCoordinator {
        let table = inodes
        let waitWatch = WaitWatch(
            logger: Logger(label: "org.coordfs.mount"), settleTime: configuration.settleTime,
            breakTime: configuration.breakTime, lockTime: configuration.lockTime,
            waitTimeout: configuration.waitTimeout
        ) { node, name in
            table.withFD(node, orElse: { _ in nil }) { fd -> WaitWatch.FileState? in
                var info = stat()
                let found =
                    name.isEmpty
                    ? fstat(fd, &info)
                    : FileSystemName.withCString(name) { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }
                return found == 0 ? WaitWatch.FileState(modified: info.st_mtim, changed: info.st_ctim) : nil
            }
        }
        let targets = ItemTargets(
            inodes: inodes, root: root, packageExtensions: configuration.packageExtensions,
            packageMarkers: PackageMarkers(lifetimeMilliseconds: Int64((configuration.cacheTimeout ?? 1) * 1000)))
        let rootFD = inodes.rootDescriptor
        let rootNode = inodes.root
        let store = SharedStore(
            domain: domain, root: root,
            isDirectory: { path in
                var info = stat()
                return FileSystemName.withCString(path) { fstatat(rootFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
                    && (info.st_mode & S_IFMT) == S_IFDIR
            }, target: { path, isDirectory in targets.target(path, isDirectory: isDirectory) },
            // Another host's read meets this host's writers as a read here does: the settle rule.
            watchesWaits: { access, path in
                let number = waitWatch.watchAnotherHost(access, item: (rootNode, path))
                return { waitWatch.forget(number) }
            })
        return MountCoordinator(
            domain: domain, configuration: configuration, targets: targets, statistics: statistics,
            filesystems: filesystems, waitWatch: waitWatch, store: store, ownership: ownership)
    }

    /// The versions the configuration asks for; none through a read-only mount, which replaces
    /// nothing, and none (said once) where the store cannot be made.
    private static func openVersions(_ configuration: MountConfiguration, root: Int32) -> MountVersions? {
        let logger = Logger(label: "org.coordfs.mount")
        guard !configuration.fuseOptions.contains("ro") else { return nil }
        do {
            return try MountVersions(configuration.versions, root: root, logger: logger)
        } catch {
            logger.warning(
                "no versions are kept: the store \(VersionStore.directoryName) cannot be made in the backing directory (\(error))"
            )
            return nil
        }
    }

    /// Starts watching the backing directory for changes made behind the mount, where the
    /// configuration asks and the kernel lets it: until then, and without it, the kernel keeps
    /// what it is told for `--cache-timeout` (a second by default).
    func watchBacking() -> BackingWatch? {
        guard configuration.watchesBacking, filesystems.rootIsLocal else { return nil }
        do {
            let watch = try BackingWatch(
                watching: configuration.backing, device: filesystems.rootDevice,
                byDirectory: configuration.watchesBackingByDirectory, for: self)
            cacheTimes.keepLong(on: watch.device)
            statistics.watchesBacking.store(true, ordering: .relaxed)
            // Files' own marks would count against a mark per directory's limits, and go
            // with them when all of them are removed.
            if watch.scope == .filesystem { watchedWrites.begin(in: watch.descriptor) }
            return watch
        } catch {
            logger.notice(
                "changes made behind the mount are not seen (\(error)); the kernel keeps names and attributes for \(unwatchedTimeout) s"
            )
            return nil
        }
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

    /// The watch of changes behind the mount no longer covers every directory: the kernel keeps
    /// nothing long from now on, and forgets what it kept.
    func stopKeepingLong() {
        cacheTimes.stopKeepingLong()
        invalidateEverything()
    }

    /// `inodes.withFD` for a handler that answers inside `body`; a node that cannot be opened
    /// is answered with its errno.
    func withFD(_ inode: Inode, answering reply: consuming Reply, _ body: (consuming Reply, Int32) -> Void) {
        inodes.withFD(inode, passing: reply, orElse: { $0.error($1) }, body)
    }

    /// Whether close(2) of an open of `inode` can go without a FLUSH to the daemon: the mount
    /// serves no locks, its backing file is on the backing directory's own filesystem, and that
    /// filesystem reports nothing at close. Flushing is then only a dup and a close of the backing descriptor, not
    /// worth a round trip to the daemon. (The writeback cache still flushes its dirty pages: the
    /// kernel sends FLUSH then regardless.)
    func sendsNoFlush(_ inode: Inode) -> Bool {
        // Where the mount serves locks, every close must reach it: it drops the process's POSIX
        // locks of the file (`flush`).
        fileLocks == nil && filesystems.rootReportsNothingAtClose && inode.device == filesystems.rootDevice
    }

    /// `KernelCacheTimes.timeout(onDevice:)`.
    @inline(__always)
    func timeout(onDevice device: UInt64) -> Double { cacheTimes.timeout(onDevice: device) }

    /// `KernelCacheTimes.attributeTimeout(for:of:readSince:)`.
    @inline(__always)
    func attributeTimeout(for info: stat, of inode: Inode, readSince: UInt64) -> Double {
        cacheTimes.attributeTimeout(for: info, of: inode, readSince: readSince)
    }

    /// `KernelCacheTimes.shortAttributeTimeout(of:)`.
    @inline(__always)
    func shortAttributeTimeout(of inode: Inode) -> Double { cacheTimes.shortAttributeTimeout(of: inode) }

    /// Marks `inode`'s file for its writes behind the mount, if it is a regular file on the
    /// watched filesystem and is not being written through kernel passthrough: the kernel has
    /// asked for its attributes again, so it may keep them long from now on. `fd`: a
    /// descriptor of it; `info`: its attributes, read again after the mark; `readSince`, the
    /// read point they were read after.
    @inline(__always)
    func watchWritesIfAsked(_ inode: Inode, fd: Int32, _ info: inout stat, readSince: inout UInt64) {
        guard info.st_mode & S_IFMT == S_IFREG, inode.device == watchedDevice,
            cacheTimes.watchedTimeout > unwatchedTimeout,
            !watchedWrites.covers(inode)
        else { return }
        let (marked, ended) = watchedWrites.watch(inode, fd: fd)
        if let ended { invalidateAttributes { $0.markGeneration.load(ordering: .relaxed) == ended } }
        guard let marked, fstat(fd, &info) == 0 else { return }
        readSince = marked
    }

    /// The owner, group and mask every item shows (`-o uid=,gid=,umask=`), as a remount left them.
    let ownership: OwnershipSetting

    /// Attributes as the mount shows them.
    @inline(__always)
    func shown(_ info: stat) -> stat {
        var shown = ownership.shown(info)
        // A file whose inode a version holds by a link (renamed over, or unlinked, while open):
        // that name is the store's, not one the file's users can see or count.
        if shown.st_mode & S_IFMT == S_IFREG, shown.st_nlink > 0, let versions, versions.store.holdsLink(to: info) {
            shown.st_nlink -= 1
        }
        return shown
    }

    /// `mount -o remount,OPTIONS`: `uid=`, `gid=` and `umask=` change at once (the kernel is
    /// told to forget the attributes it keeps); any other option must be as the mount has it
    /// (`ro` and `rw` are the kernel's, which the helper asks of it). Nil when done, or why not.
    package func remount(_ options: [String]) -> String? {
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
        invalidateAttributes { _ in true }
        logger.notice(
            "remounted: owner \(view.owner.map(String.init) ?? "as stored"), group \(view.group.map(String.init) ?? "as stored"), umask \(view.umask.map { String($0, radix: 8) } ?? "none")"
        )
        return nil
    }

    /// Options a remount may name whatever the mount has: the request itself, `ro` and `rw`,
    /// and what mount(8) reads back from the kernel's table of the mount (its flags, and FUSE's
    /// own options). (mount(8)'s own the helper keeps to itself: `Mount.mountHelperOptions`.)
    static func passesRemount(_ option: String) -> Bool {
        let name = option.split(separator: "=", maxSplits: 1).first.map(String.init) ?? option
        return [
            "remount", "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "relatime", "strictatime",
            "lazytime",
            "nolazytime", "default_permissions", "user_id", "group_id", "rootmode", "fd", "fsname", "subtype",
            "blksize"
        ].contains(name)
    }

    /// Looks up `name` in `parent` on the backing directory and records the node.
    func lookupNode(_ parent: Inode, _ name: String, justMade: Bool = false) throws(Errno) -> (Inode, stat) {
        // Not known yet when just made: looking for it first would cost a call more.
        if !justMade && parent.childrenAreKnown.load(ordering: .relaxed) {
            if let known = try inodes.knownChild(named: name, in: parent) {
                statistics.knownLookups.add(1, ordering: .relaxed)
                return known
            }
            statistics.knownLookupMisses.add(1, ordering: .relaxed)
        }
        // On the backing root's own filesystem (local wherever requests are laned by item).
        if let (inode, info, known) = try inodes.rememberUnopened(named: name, in: parent) {
            if known { statistics.knownLookups.add(1, ordering: .relaxed) }
            return (inode, info)
        }
        // Opened, a node just made is found known by its siblings' next lookups.
        if justMade && !parent.childrenAreKnown.load(ordering: .relaxed) {
            parent.childrenAreKnown.store(true, ordering: .relaxed)
        }
        let (fd, info) = try inodes.openChild(named: name, in: parent)
        guard backing.lanesByItem else {
            return (inodes.remember(fd: fd, info: info, in: parent, name: name, justMade: justMade), info)
        }
        // Looked at before `remember`, which may close `fd`.
        let filesystem = filesystems.look(atDevice: UInt64(info.st_dev), of: fd)
        let inode = inodes.remember(fd: fd, info: info, in: parent, name: name, justMade: justMade)
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
        cfs_ring_lane_node(device, inode.id.value)
        if parent.device != inode.device { cfs_ring_lane_node(device, parent.id.value) }
        if firstOnItsFilesystem && cfs_ring_facts(device).queues > 0 {
            logger.notice(
                "a filesystem that is not local is mounted at '\(targets.relativePath(inode))': lane threads serve its requests"
            )
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
