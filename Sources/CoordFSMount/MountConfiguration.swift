import LinuxSystem
import CoordinationRuntime
import FileVersions
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How a path of the mount is coordinated.
public enum CoordinationMode: String, Sendable, CaseIterable {
    /// Opens, creations, renames and deletions take intents and wait as the model says; an
    /// appending open shares with readers, and writers in place share with each other (U1, U2).
    case exclusive
    /// As `exclusive`, but every open for writing excludes every other open.
    case strict
    /// Presenters are told afterwards; nobody waits.
    case notify
    /// Plain passthrough.
    case off

    /// Whether accesses hold their intents (others wait for them).
    public var holds: Bool { self == .exclusive || self == .strict }
}

/// Everything a mount needs to know; built from the command line or a profile in `Mounts/`.
public struct MountConfiguration: Sendable {
    public var backing: String
    public var mountPoint: String
    public var mode: CoordinationMode = .exclusive
    /// Per-path modes: a glob against the path relative to the mount root (`*` crosses `/`);
    /// the first that matches wins.
    public var modeRules: [(pattern: String, mode: CoordinationMode)] = []
    /// What is kept of content the mount replaces, per path, and who counts as one reader.
    public var versions = VersionSettings()
    /// How long an open may wait for others before it fails with EBUSY, and a hold through the
    /// mount's control socket that names no timeout; nil waits forever.
    public var waitTimeout: Duration? = CoordinationDomain.standardWaitTimeout
    /// How long presenters have to answer.
    public var presenterTimeout: Duration = .seconds(5)
    /// How long an access waits at most for an open file of an unmodified program (a lease), or
    /// for another user's holds (through the mount or its control socket), before it goes ahead,
    /// as Linux's `lease-break-time`; nil: as long as the wait timeout.
    public var breakTime: Duration? = .seconds(45)
    /// How long a file held open for writing must have stayed unchanged before an access that
    /// waits for it goes ahead: a program that keeps its output open and no longer writes (a
    /// server's port file) holds nobody up past it. nil: only the break time.
    public var settleTime: Duration? = .seconds(1)
    /// How long a request the kernel keeps a lock for while it waits (a name change, a create,
    /// a setattr, a truncation: meanwhile nobody can list, look up or create names in its
    /// directory, or write its file) waits at most for other users' holds, open files and
    /// presenters; then it goes ahead. A request about a name in a directory other users may
    /// list or search (with `allow_other`) waits that long at most for its own user's too; then
    /// it fails with EBUSY. nil: the break time, and its own user's by their rules.
    public var lockTime: Duration? = .seconds(1)
    /// How long a flock or fcntl lock request the mount serves (a host of a shared store) waits
    /// at most before it fails with ENOLCK: set only where the kernel's request timeout would
    /// otherwise abort the connection (`fitWaits`). nil: as long as the lock is held, as POSIX has it.
    public var lockWaitLimit: Duration? = nil
    public var packageExtensions: Set<String> = []
    /// Whose refusals are vetoes for whom (`VetoScope`): the mount's owner may let any user's
    /// refusals fail anyone's accesses.
    public var vetoScope = VetoScope.ownUser
    /// Extra FUSE options (`-o`), besides the ones coordfs always sets.
    public var fuseOptions: [String] = []
    /// Mount even where another coordfs mount's backing overlaps this one's (`--allow-overlap`,
    /// or `-o allow_overlap` from fstab); the command refuses that otherwise.
    public var allowsOverlap = false
    /// The cluster of hosts sharing the store this mount coordinates with (`--cluster`); nil:
    /// this host alone.
    public var cluster: ClusterSetting?
    /// Attribute and entry timeouts the kernel may cache for; nil: the mount chooses, a day for
    /// items on the backing directory's filesystem while it watches it for changes made behind
    /// it (`watchesBacking`), one second otherwise.
    public var cacheTimeout: Double? = nil
    /// Watch the backing directory for changes made behind the mount (fanotify): the kernel
    /// forgets what it keeps of what changed, and presenters hear of it.
    public var watchesBacking = true
    /// Watch with a mark on each directory below BACKING even where its whole filesystem could
    /// be marked (which needs root).
    public var watchesBackingByDirectory = false
    public var writebackCache = false
    /// Let the kernel serve reads and writes of open files straight from the backing files
    /// (Linux 6.9 or later, root); off with the writeback cache, which needs the page cache.
    public var kernelPassthrough = true
    /// Take requests through FUSE over io_uring when the kernel offers it (Linux 6.14 or later
    /// with `fuse.enable_uring=Y`): one queue per CPU, served by a thread on that CPU.
    public var ioUring = true
    /// Which requests the io_uring queues hand to their lane threads (see `RingLanes`).
    public var ringLanes = RingLanes.auto
    /// The nice value of the threads that serve the kernel's requests: the io_uring queue
    /// threads and the lane threads they start, or libfuse's workers on /dev/fuse; 0 leaves them
    /// at the daemon's. A few steps ahead of the programs they serve, a lone program is not
    /// moved to the other CPU by each reply (ring.c, `cfs_take_nice`). Below 0 needs root.
    public var serveNice: Int32 = -5
    /// Threads serving kernel requests, started as requests overlap. One thread serves a lone
    /// program's metadata calls much faster on a small VM (docs/mount.md), but a slow system
    /// call on the backing directory then holds up every other request; waits for coordination
    /// never do (they hold no thread).
    public var maxThreads: UInt32 = 16
    /// Reopen evicted inode descriptors from file handles where the process and the backing
    /// filesystem allow; false (or where they do not), from the parent and the name.
    public var fileHandles = true
    /// How many inode descriptors stay open; nil: `DescriptorLimit.defaultBudget`, or less
    /// where the open-file limit is lower (see `DescriptorLimit`).
    public var descriptorBudget: Int?
    /// How many files and directories each user other than the mount's owner and root may keep
    /// open through the mount at once (`OpenFileBudget`); nil: `DescriptorLimit.openFilesPerUser`.
    public var openFilesPerUser: Int?
    /// The control socket (nil: one under /run/coordfs or the user's runtime directory).
    public var socketPath: String?
    /// Whether to serve the control socket at all.
    public var servesControlSocket = true
    /// For tests: called by a coordinated request once it has named its targets, before it asks
    /// the engine (a test can move them meanwhile).
    public var afterNamingTargets: (@Sendable () -> Void)?
    /// For tests: called by a request that passed a quiet gate, before its body runs (a test
    /// can keep it passing meanwhile).
    public var whilePassingQuietly: (@Sendable () -> Void)?

    /// `-o uid=,gid=,umask=`: the owner, group and permissions every item shows.
    public var ownershipView = OwnershipView()

    /// Whether other users may use the mount (and so the control socket).
    public var allowsOthers: Bool { fuseOptions.contains("allow_other") }

    /// Whether the kernel checks permissions (`default_permissions`): always when others may use
    /// the mount. Without `allow_other` the kernel lets in only processes of the mount's own user,
    /// whose rights the daemon has: a check there would change nothing but cost a GETATTR of the
    /// directory before every create, unlink and rename (the kernel forgets a directory's
    /// attributes at each change in it). `-o default_permissions` asks for it anyway.
    public var kernelChecksPermissions: Bool { allowsOthers || fuseOptions.contains("default_permissions") }

    /// `-o max_read=N`: libfuse passes it to the kernel at mount and insists that INIT ask for
    /// the same (or it fails the mount after it was made); nil when not given.
    public var maxRead: UInt32? {
        fuseOptions.last { $0.hasPrefix("max_read=") }.flatMap { UInt32($0.dropFirst("max_read=".count)) }
    }

    /// Whether the mount is `noatime` (the last of `noatime` and `atime` wins, as the kernel
    /// reads them; libfuse 3.14 knows no other atime option).
    public var isNoatime: Bool {
        fuseOptions.last { $0 == "noatime" || $0 == "atime" } == "noatime"
    }

    /// Whether every change must be on disk before it is answered: `-o sync` (the last of
    /// `sync` and `async` wins).
    public var isSynchronous: Bool {
        fuseOptions.last { $0 == "sync" || $0 == "async" } == "sync"
    }

    /// Whether a change of names must be on disk before it is answered: `-o dirsync`, or
    /// `-o sync`, which the kernel takes as dirsync too.
    public var isDirsync: Bool { isSynchronous || fuseOptions.contains("dirsync") }

    /// Whether a `noatime` mount reads through a private noatime copy of the backing's mounts
    /// (`AccessTimes`); false makes it fall back to O_NOATIME opens, as where the copy cannot be
    /// made (for tests).
    public var noatimeThroughPrivateMounts = true

    public init(backing: String, mountPoint: String) {
        self.backing = backing
        self.mountPoint = mountPoint
    }

    /// The mode for a path relative to the mount root.
    public func mode(for relativePath: String) -> CoordinationMode {
        for rule in modeRules where fnmatch(rule.pattern, relativePath, 0) == 0 { return rule.mode }
        return mode
    }
}

/// Which requests an io_uring queue hands to its lane threads instead of serving them itself.
/// A lane costs a hand-over between two threads; a request served on the queue thread holds up
/// that CPU's later requests while it waits.
public enum RingLanes: String, Sendable, CaseIterable {
    /// `blocking` on a local backing filesystem, `all` on any other; on a local one, also every
    /// request about an item on a filesystem that is not local, mounted inside it, once a lookup
    /// has met that mount (`BackingFilesystems.localFilesystems`).
    case auto
    /// Every request: for a backing directory where any call may wait long (a network or FUSE
    /// filesystem, or one mounted over such).
    case all
    /// Only requests that may wait long on any filesystem: fsync, truncation, data not passed
    /// through, and the like.
    case blocking
}

/// Where a mount's cluster is, and who it is there (`--cluster`).
public struct ClusterSetting: Sendable, Equatable {
    /// The etcd members' URLs.
    public var endpoints: [String]
    /// The store's name: mounts that name the same cluster and store coordinate.
    public var store: String
    /// This host's name.
    public var host: String
    /// Seconds etcd keeps this host's grants after its last renewal.
    public var ttl: Int64
    /// Once its lease is lost and etcd cannot be reached, the host coordinates its own programs
    /// alone (with a loud warning) instead of refusing.
    public var aloneWhenUnreachable = false
    /// https members: the PEM file of the CA their certificates are signed by (nil: the
    /// system's), and this host's certificate and key for members that ask for one.
    public var etcdCA: String?
    public var etcdCertificate: String?
    public var etcdKey: String?
    /// The etcd user this host authenticates as, and its password (from a file or the
    /// environment, never the command line).
    public var etcdUser: String?
    public var etcdPassword: String?
    /// The secret of `--cluster-key-file` (the file's bytes): the store's item names are hidden
    /// from etcd under it, as on every other host of the store (nil: in clear).
    public var clusterKey: [UInt8]?

    public init(endpoints: [String], store: String, host: String, ttl: Int64, aloneWhenUnreachable: Bool = false) {
        self.endpoints = endpoints
        self.store = store
        self.host = host
        self.ttl = ttl
        self.aloneWhenUnreachable = aloneWhenUnreachable
    }
}
