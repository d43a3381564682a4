import LinuxSystem
import CLinux
import CFusePassthrough
import Coordination
import FileVersions
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
/// and deletions into coordinated intents of the calling process (docs/mount.md). Handlers are
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
    let waitingRequests = WaitingRequests()
    /// The device whose items the kernel may keep long (`timeout(onDevice:)`): the backing
    /// directory's, once `watchBacking` watches it; none again if the watch cannot cover every
    /// directory (`stopKeepingLong`).
    private let watched = Atomic<UInt64>(.max)
    var watchedDevice: UInt64 { watched.load(ordering: .relaxed) }
    let watchedTimeout: Double
    let unwatchedTimeout: Double
    let statistics: MountStatistics
    /// Files whose writes behind the mount are seen as they are made: the kernel keeps their
    /// attributes long (`attributeTimeout(for:of:readSince:)`).
    let watchedWrites: WatchedWrites
    /// Waiting requests whose wait must end early: under a kernel lock, for a settled file,
    /// past the break time (`WaitWatch`).
    let waitWatch: WaitWatch
    /// Opens that went ahead by a break, which cover their processes' next calls on their items.
    let brokenOpens = BrokenOpens()
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
    /// What is kept of content the mount replaces, and which writes are stale (nil: none).
    let versions: MountVersions?
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
    /// The delegations of a host of a shared store (`--cluster`): set before the session runs.
    public var delegations: (any HostDelegations)?
    /// The mount's items as a host of a store shared with other hosts sees them: the backing
    /// directory, at the mount point.
    public var store: SharedStore { sharedStore! }
    /// Set once, at the end of `init` (its targets are the mount's own, packages and all).
    private var sharedStore: SharedStore?
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
        statistics = MountStatistics()
        watchedWrites = WatchedWrites(statistics: statistics)
        ownership = OwnershipSetting(configuration.ownershipView)
        guard let root = ItemPath(configuration.mountPoint) else {
            throw MountError.invalid("mount point '\(configuration.mountPoint)' is not an absolute path")
        }
        mountRoot = root
        watchedTimeout = configuration.cacheTimeout ?? 86_400
        unwatchedTimeout = configuration.cacheTimeout ?? 1
        packageMarkers = PackageMarkers(lifetimeMilliseconds: Int64((configuration.cacheTimeout ?? 1) * 1000))
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
        versions = Self.openVersions(configuration, root: fd)
        lanesByItem = configuration.ioUring && configuration.ringLanes == .auto && filesystems.rootIsLocal
        let table = inodes
        waitWatch = WaitWatch(logger: Logger(label: "org.coordfs.mount"), settleTime: configuration.settleTime,
                              breakTime: configuration.breakTime, lockTime: configuration.lockTime) { node, name in
            table.withFD(node, orElse: { _ in nil }) { fd -> WaitWatch.FileState? in
                var info = stat()
                let found = name.isEmpty ? fstat(fd, &info) : FileSystemName.withCString(name) { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }
                return found == 0 ? WaitWatch.FileState(modified: info.st_mtim, changed: info.st_ctim) : nil
            }
        }
        waitWatch.tellBroken = { [domain] paths, grants, accessor in
            domain.tellCoordinationBroken(at: paths, grants: grants, by: accessor)
        }
        // Weak: a recall's task may outlive the mount by a moment.
        let rootFD = fd
        sharedStore = SharedStore(domain: domain, root: mountRoot, isDirectory: { path in
            var info = stat()
            return FileSystemName.withCString(path) { fstatat(rootFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0 && (info.st_mode & S_IFMT) == S_IFDIR
        }, target: { [weak self] path, isDirectory in
            self?.target(path, isDirectory: isDirectory) ?? AccessTarget(path: path, isDirectory: isDirectory)
        })
    }

    deinit {
        if backingPin >= 0 { close(backingPin) }
    }

    /// The versions the configuration asks for; none through a read-only mount, which replaces
    /// nothing, and none (said once) where the store cannot be made.
    private static func openVersions(_ configuration: MountConfiguration, root: Int32) -> MountVersions? {
        let logger = Logger(label: "org.coordfs.mount")
        guard !configuration.fuseOptions.contains("ro") else { return nil }
        do {
            return try MountVersions(configuration.versions, root: root, logger: logger)
        } catch {
            logger.warning("no versions are kept: the store \(VersionStore.directoryName) cannot be made in the backing directory (\(error))")
            return nil
        }
    }

    /// Starts watching the backing directory for changes made behind the mount, where the
    /// configuration asks and the kernel lets it: until then, and without it, the kernel keeps
    /// what it is told for `--cache-timeout` (a second by default).
    func watchBacking() -> BackingWatch? {
        guard configuration.watchesBacking, filesystems.rootIsLocal else { return nil }
        do {
            let watch = try BackingWatch(watching: configuration.backing, device: filesystems.rootDevice,
                                         byDirectory: configuration.watchesBackingByDirectory, for: self)
            watched.store(watch.device, ordering: .relaxed)
            statistics.watchesBacking.store(true, ordering: .relaxed)
            // Files' own marks would count against a mark per directory's limits, and go
            // with them when all of them are removed.
            if watch.scope == .filesystem { watchedWrites.begin(in: watch.descriptor) }
            return watch
        } catch {
            logger.notice("changes made behind the mount are not seen (\(error)); the kernel keeps names and attributes for \(unwatchedTimeout) s")
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
        watched.store(.max, ordering: .relaxed)
        invalidateEverything()
    }

    /// `inodes.withFD` for a handler that answers inside `body`; a node that cannot be opened
    /// is answered with its errno.
    func withFD(_ inode: Inode, answering reply: consuming Reply, _ body: (consuming Reply, Int32) -> Void) {
        inodes.withFD(inode, passing: reply, orElse: { $0.error($1) }, body)
    }

    /// Whether close(2) of an open of `inode` can go without a FLUSH to the daemon: its
    /// backing file is on the backing directory's own filesystem, and that filesystem reports
    /// nothing at close. Flushing is then only a dup and a close of the backing descriptor, not
    /// worth a round trip to the daemon. (The writeback cache still flushes its dirty pages: the
    /// kernel sends FLUSH then regardless.)
    func sendsNoFlush(_ inode: Inode) -> Bool {
        filesystems.rootReportsNothingAtClose && inode.device == filesystems.rootDevice
    }

    /// How long the kernel may keep names and attributes of items on `device`: long on the
    /// backing directory's own filesystem while the mount watches it (what changes behind the
    /// mount is forgotten as it changes), `--cache-timeout` or a second elsewhere.
    @inline(__always)
    func timeout(onDevice device: UInt64) -> Double {
        device == watchedDevice ? watchedTimeout : unwatchedTimeout
    }

    /// How long the kernel may keep an item's attributes: a directory's as long as its name
    /// (they change only as names do, which the watch sees), and a file's whose writes behind
    /// the mount are seen as they are made (`WatchedWrites`); another file's for
    /// `--cache-timeout` or a second, since a program writing it in place behind the mount is
    /// seen only at its close.
    /// `readSince`: `watchedWrites.readPoint` taken before `info` was read (a file marked
    /// after that may have been written just before its mark, and `info` not show it).
    @inline(__always)
    func attributeTimeout(for info: stat, of inode: Inode, readSince: UInt64) -> Double {
        info.st_mode & S_IFMT == S_IFDIR || watchedWrites.covers(inode, readSince: readSince)
            ? timeout(onDevice: UInt64(info.st_dev)) : unwatchedTimeout
    }

    /// Marks `inode`'s file for its writes behind the mount, if it is a regular file on the
    /// watched filesystem and is not being written through kernel passthrough: the kernel has
    /// asked for its attributes again, so it may keep them long from now on. `fd`: a
    /// descriptor of it; `info`: its attributes, read again after the mark; `readSince`, the
    /// read point they were read after.
    @inline(__always)
    func watchWritesIfAsked(_ inode: Inode, fd: Int32, _ info: inout stat, readSince: inout UInt64) {
        guard info.st_mode & S_IFMT == S_IFREG, inode.device == watchedDevice, watchedTimeout > unwatchedTimeout,
              !watchedWrites.covers(inode) else { return }
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
        invalidateAttributes { _ in true }
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
        guard lanesByItem else { return (inodes.remember(fd: fd, info: info, in: parent, name: name, justMade: justMade), info) }
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
