import LinuxSystem
import ArgumentParser
import CoordinationWire
import CoordFSMount
import FileCoordination
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

extension CoordinationMode: ExpressibleByArgument {}
extension RingLanes: ExpressibleByArgument {}
extension VetoScope: ExpressibleByArgument {}

/// `coordfs mount BACKING MOUNTPOINT`.
struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show BACKING at MOUNTPOINT, coordinating every open, create, rename and unlink.",
        discussion: """
            Returns once the mount is ready; -f stays in the foreground. SIGINT, SIGTERM or \
            `coordfs unmount MOUNTPOINT` unmount it cleanly. An open that conflicts waits; the wait \
            ends with EINTR on a signal, EAGAIN at once for O_NONBLOCK, EDEADLK on a cycle of \
            processes, and EBUSY after --wait-timeout. \
            Exit status: 0 once the mount is ready (with -f, once it has been unmounted cleanly); 1 \
            when it is refused or cannot be made, with the reason on standard error; 64 for a command \
            line it cannot take.
            """
    )

    @Argument(help: "The directory to show (taken from the profile when omitted).", completion: .directory)
    var backing: String?

    @Argument(help: "An empty directory to mount on (taken from the profile when omitted).", completion: .directory)
    var mountPoint: String?

    @Flag(name: .short, help: "Stay in the foreground.")
    var foreground = false

    @Option(
        name: .short,
        help: ArgumentHelp(
            "FUSE options, comma-separated (allow_other, ro, noatime, ...), and uid=, gid=, umask= as sshfs takes them.",
            valueName: "options"))
    var o: [String] = []

    @Option(
        help:
            "exclusive (wait as the model says), strict (every writer excludes every open, no settling), notify (presenters told, nobody waits) or off."
    )
    var coordination: CoordinationMode?

    @Option(
        help:
            "Seconds an access waits for others before EBUSY, through the mount or a hold through its control socket that names no timeout (default 60, as everywhere in coordfs; 0: fail at once, as flock -w 0 and coordinate -w 0; infinity: wait forever)."
    )
    var waitTimeout: Double?

    @Option(help: "Seconds presenters have to answer (default 5).")
    var presenterTimeout: Double?

    @Option(
        help:
            "Seconds an access waits at most for a file another program keeps open, or for another user's holds (through the mount or its control socket), as Linux's lease-break-time (default 45; 0: the wait timeout)."
    )
    var breakTime: Double?

    @Option(
        help:
            "Seconds a file held open for writing must stay unchanged before readers waiting for it go ahead (default 1; 0: wait the break time)."
    )
    var settleTime: Double?

    @Option(
        help:
            "Seconds an rm, mv, create, chmod or truncate waits at most for another user's hold, open file or presenter, while nobody can list or create in its directory; and an rm, mv or create in a directory others may list or search for its own user's, before it fails with EBUSY (default 1; 0: wait the break time, and the own user's by their rules)."
    )
    var lockTime: Double?

    @Option(
        help:
            "Whose refusals fail whose accesses: own-user (a presenter's refusal fails its own user's accesses, root's anyone's; another user's is reported and ignored; the default) or anyone (any refusal fails any access, for users who trust each other)."
    )
    var vetoes: VetoScope?

    @Option(
        help:
            "Seconds the kernel may keep names and attributes, and package markers are remembered (default: a day while the mount watches the backing directory for changes made behind it, which it forgets as they come; 1 otherwise)."
    )
    var cacheTimeout: Double?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Watch the backing directory for changes made behind the mount: the kernel forgets what changed and presenters hear of it (fanotify; default on)."
    )
    var backingWatch = true

    @Flag(
        help:
            "Watch with a mark on each directory below BACKING rather than one on its whole filesystem (what a mount without root does): for a small tree on a busy filesystem."
    )
    var backingWatchByDirectory = false

    @Option(
        help: "A profile: NAME.profile in $COORDFS_MOUNTS, else in ./Mounts; or a path to one.",
        completion: .file(extensions: ["profile"]))
    var profile: String?

    @Option(
        help:
            "Write the daemon's log to this file (-o log=FILE from fstab, the profile key log). Without it, a mount that returns logs to the system log (the journal, or syslog); one in the foreground (-f), to standard error.",
        completion: .file())
    var log: String?

    @Flag(
        help:
            "Let the kernel cache writes and send them later (faster small writes; see docs/mount.md for the trade-off)."
    )
    var writebackCache = false

    @Flag(
        inversion: .prefixedNo,
        help:
            "Let the kernel serve reads and writes of open files straight from the backing files (Linux 6.9+, as root; default on, off with --writeback-cache)."
    )
    var kernelPassthrough = true

    @Flag(
        inversion: .prefixedNo,
        help:
            "Take requests through FUSE over io_uring, one queue per CPU, when the kernel offers it (Linux 6.14+ with the fuse module's enable_uring=Y; default on)."
    )
    var ioUring = true

    @Option(
        help:
            "Which io_uring requests go to lane threads: auto (all on a backing that is not local; on a local one, blocking, and all for items on a filesystem that is not local mounted inside it), all, or blocking (fsync, truncation and the like)."
    )
    var ringLanes: RingLanes?

    @Option(
        help: ArgumentHelp(
            "The nice value of the threads that serve the kernel's requests, written --serve-nice=N (default -5, a few steps ahead of the programs they serve; 0 leaves them at the daemon's; below 0 needs root).",
            valueName: "n"))
    var serveNice: Int?

    @Option(
        help:
            "How many inode descriptors to keep open (default 12000, or three fifths of the open-file limit where that is lower; the rest reopen by file handle)."
    )
    var descriptorBudget: Int?

    @Option(
        help:
            "How many files and directories each user other than the mount's owner and root may keep open through the mount at once; one past it gets EMFILE (default: a quarter of what the descriptor budget leaves of the open-file limit, 2000 under 20000)."
    )
    var openFilesPerUser: Int?

    @Option(help: "At most this many threads serve kernel requests (default 16; see docs/mount.md for 1).")
    var threads: Int?

    @Flag(name: .customShort("s"), help: "One thread serves kernel requests, as --threads 1 (FUSE's -s).")
    var singleThreaded = false

    @Flag(help: .hidden)  // mount(8)'s -f for its helper: check everything, mount nothing
    var fake = false

    @Flag(help: .hidden)  // mount(8)'s -v for its helper: say what is mounted
    var verbose = false

    @Flag(
        help:
            "Mount even when BACKING is, holds or lies inside the backing of another coordfs mount (the two do not coordinate with each other; -o allow_overlap from fstab)."
    )
    var allowOverlap = false

    @OptionGroup(title: "Versions")
    var versionOptions: VersionOptions

    @OptionGroup(title: "Hosts that share a store")
    var clusterOptions: ClusterOptions

    func run() throws {
        if o.contains(where: { $0.split(separator: ",").contains("remount") }) { return try remount() }
        let (configuration, logFile) = try makeConfiguration()
        try Self.validate(configuration)
        if let logFile { try Self.checkLog(logFile) }
        if verbose || fake {
            print(
                "coordfs: \(fake ? "would mount" : "mounting") \(configuration.backing) on \(configuration.mountPoint)"
                    + (configuration.fuseOptions.isEmpty
                        ? "" : " -o \(configuration.fuseOptions.joined(separator: ","))"))
        }
        if fake { return }
        if foreground {
            // A daemon's stderr is its parent's failure message: the parent gives the note.
            if ProcessInfo.processInfo.environment["COORDFS_NOTIFY_READY"] != "1" {
                Self.noteTransport(configuration)
                Self.noteRequestTimeout(configuration)
            }
            try serve(configuration, log: logFile)
        } else {
            try spawnDaemon()
            Self.noteTransport(configuration)
            Self.noteRequestTimeout(configuration)
        }
    }

    /// Where this kernel switches FUSE over io_uring on and off (absent before Linux 6.14).
    /// (`COORDFS_IO_URING_SWITCH` names another file, for the tests of the note: no test
    /// switches the machine's kernel.)
    static var ioUringSwitch: String {
        ProcessInfo.processInfo.environment["COORDFS_IO_URING_SWITCH"] ?? "/sys/module/fuse/parameters/enable_uring"
    }

    /// Whether this kernel has FUSE over io_uring, switched off.
    static var ioUringSwitchedOff: Bool {
        (try? String(contentsOfFile: ioUringSwitch, encoding: .utf8))?.hasPrefix("N") == true
    }

    /// One line on stderr when FUSE over io_uring is wanted and the kernel has it, switched off:
    /// the mount then works through /dev/fuse, at about half the speed on metadata, and nothing
    /// else would tell.
    static func noteTransport(_ configuration: MountConfiguration) {
        guard configuration.ioUring, ioUringSwitchedOff else { return }
        FileHandle.standardError.write(
            Data(
                ("coordfs: note: this kernel has FUSE over io_uring switched off (fuse enable_uring=N), so requests "
                    + "go through /dev/fuse, about half as fast on metadata; as root, `echo Y > \(ioUringSwitch)` switches it on for later "
                    + "mounts (--no-io-uring: no note)\n").utf8))
    }

    /// One line on stderr when the kernel aborts FUSE requests after a timeout: which bound the
    /// mount's waits keep to (`MountConfiguration.fitWaits`).
    static func noteRequestTimeout(_ configuration: MountConfiguration) {
        var fitted = configuration
        guard let note = fitted.fitWaits(within: .inForce()) else { return }
        FileHandle.standardError.write(Data("coordfs: note: \(note)\n".utf8))
    }

    /// The mount's configuration, and the file its daemon logs to, if one is named (`--log`,
    /// else `-o log=`, else the profile's `log`).
    func makeConfiguration() throws -> (MountConfiguration, log: String?) {
        var loaded: Profile?
        if let profile {
            guard let url = Profile.locate(profile) else {
                throw CommandFailure("no profile named '\(profile)' (looked in ./Mounts)")
            }
            loaded = try Profile(contentsOf: url)
        }
        guard let backing = backing ?? loaded?.backing else { throw CommandFailure("missing BACKING directory") }
        guard let mountPoint = mountPoint ?? loaded?.mountPoint else { throw CommandFailure("missing MOUNTPOINT") }
        var configuration = MountConfiguration(backing: Self.absolute(backing), mountPoint: Self.absolute(mountPoint))
        configuration.mode = coordination ?? loaded?.mode ?? .exclusive
        configuration.modeRules = loaded?.rules.map { (pattern: $0.0, mode: $0.1) } ?? []
        // 0 fails at once, as everywhere else in coordfs (coordinate -w 0, a coordinator's
        // waitTimeout of zero, flock -w 0); only an infinity waits forever. Not given: the one
        // default of coordfs (`CoordinationDomain.standardWaitTimeout`).
        if let wait = waitTimeout ?? loaded?.waitTimeout {
            configuration.waitTimeout = wait == .infinity ? nil : try Seconds.duration(wait, option: "--wait-timeout")
        }
        configuration.presenterTimeout = try Seconds.duration(
            presenterTimeout ?? loaded?.presenterTimeout ?? 5, option: "--presenter-timeout")
        let breakSeconds = breakTime ?? loaded?.breakTime ?? 45
        configuration.breakTime = breakSeconds == 0 ? nil : try Seconds.duration(breakSeconds, option: "--break-time")
        let settleSeconds = settleTime ?? loaded?.settleTime ?? 1
        configuration.settleTime =
            settleSeconds == 0 ? nil : try Seconds.duration(settleSeconds, option: "--settle-time")
        let lockSeconds = lockTime ?? loaded?.lockTime ?? 1
        configuration.lockTime = lockSeconds == 0 ? nil : try Seconds.duration(lockSeconds, option: "--lock-time")
        let cache = cacheTimeout ?? loaded?.cacheTimeout
        if let cache, !(cache >= 0 && cache <= 86_400) {
            throw CommandFailure("--cache-timeout must be between 0 and 86400 seconds")
        }
        configuration.cacheTimeout = cache
        configuration.watchesBacking = backingWatch && loaded?.backingWatch != false
        configuration.watchesBackingByDirectory = backingWatchByDirectory || loaded?.backingWatchByDirectory == true
        configuration.packageExtensions = Set(loaded?.packageExtensions ?? [])
        configuration.vetoScope = vetoes ?? loaded?.vetoScope ?? .ownUser
        configuration.writebackCache = writebackCache || loaded?.writebackCache == true
        configuration.kernelPassthrough = kernelPassthrough && loaded?.kernelPassthrough != false
        configuration.ioUring = ioUring && loaded?.ioUring != false
        configuration.ringLanes = ringLanes ?? loaded?.ringLanes ?? .auto
        let nice = serveNice ?? loaded?.serveNice ?? Int(configuration.serveNice)
        guard MountCommandLimits.nice.contains(nice) else {
            throw CommandFailure(
                "--serve-nice must be from \(MountCommandLimits.nice.lowerBound) to \(MountCommandLimits.nice.upperBound)"
            )
        }
        configuration.serveNice = Int32(nice)
        if let descriptorBudget {
            guard descriptorBudget >= 16 else { throw CommandFailure("--descriptor-budget must be at least 16") }
            configuration.descriptorBudget = descriptorBudget
        }
        if let perUser = openFilesPerUser ?? loaded?.openFilesPerUser {
            guard perUser >= 1 else { throw CommandFailure("--open-files-per-user must be at least 1") }
            configuration.openFilesPerUser = perUser
        }
        if singleThreaded, let threads, threads != 1 {
            throw CommandFailure("-s is --threads 1; it cannot go with --threads \(threads)")
        }
        if let count = singleThreaded ? 1 : threads ?? loaded?.threads {
            guard MountCommandLimits.threads.contains(count) else {
                throw CommandFailure("--threads must be from 1 to \(MountCommandLimits.threads.upperBound)")
            }
            configuration.maxThreads = UInt32(count)
        }
        let options = (loaded?.options ?? []) + o.flatMap { $0.split(separator: ",").map(String.init) }
        // `log=FILE`, for a mount from fstab or a systemd unit: coordfs's, not FUSE's.
        let logOption = options.last { $0.hasPrefix("log=") }.map { String($0.dropFirst(4)) }
        var fuseOptions = options.filter {
            !Self.mountHelperOptions.contains($0) && $0 != "allow_overlap" && !$0.hasPrefix("log=")
        }
        do { configuration.ownershipView = try OwnershipView.take(from: &fuseOptions) } catch {
            throw CommandFailure("-o \(error)")
        }
        configuration.fuseOptions = fuseOptions
        configuration.allowsOverlap = allowOverlap || options.contains("allow_overlap")
        configuration.cluster = try clusterOptions.setting(over: loaded)
        configuration.versions = try versionOptions.setting(over: loaded)
        let logFile = log ?? logOption ?? loaded?.log
        return (configuration, logFile.map(Self.absolute))
    }

    /// Refuses a log file the daemon could not write (or make), before mounting: once detached,
    /// it would have nowhere to say so. Nothing is made here (`--fake` makes nothing).
    static func checkLog(_ path: String) throws {
        let target = FileManager.default.fileExists(atPath: path) ? path : (path as NSString).deletingLastPathComponent
        do throws(Errno) { _ = try check(access(target, W_OK)) } catch {
            throw CommandFailure("cannot write the log '\(path)': \(error.description)")
        }
    }

    /// Options mount(8) and fstab pass that are not FUSE's.
    static let mountHelperOptions: Set<String> = [
        "rw", "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail"
    ]

    static func absolute(_ path: String) -> String {
        let url =
            path.hasPrefix("/")
            ? URL(fileURLWithPath: path)
            : URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path)
        return url.standardizedFileURL.path
    }

    /// Refuses what would not work, with one clear line each.
    static func validate(_ configuration: MountConfiguration) throws {
        var isDirectory: ObjCBool = false
        let fileManager = FileManager.default
        // Either on a FUSE mount whose daemon died would read as missing.
        try MountTable.refuseAbandoned(configuration.mountPoint)
        try MountTable.refuseAbandoned(configuration.backing)
        guard fileManager.fileExists(atPath: configuration.backing, isDirectory: &isDirectory) else {
            throw CommandFailure(
                "backing directory '\(configuration.backing)' " + Self.whyMissing(configuration.backing))
        }
        guard isDirectory.boolValue else {
            throw CommandFailure("backing '\(configuration.backing)' is not a directory")
        }
        // The daemon serves the backing directory with its own user's rights: one that user
        // cannot list and search would mount, and answer every access with EACCES (bindfs
        // refuses it too).
        do throws(Errno) { _ = try check(access(configuration.backing, R_OK | X_OK)) } catch {
            throw CommandFailure(
                "cannot read backing directory '\(configuration.backing)' (\(error.description)): the mount serves it "
                    + "with the rights of \(MountTable.userName(geteuid())), who could do nothing through it; give that user read and "
                    + "search permission on it, or mount it as a user who has them")
        }
        guard fileManager.fileExists(atPath: configuration.mountPoint, isDirectory: &isDirectory) else {
            throw CommandFailure(
                "mount point '\(configuration.mountPoint)' " + Self.whyMissing(configuration.mountPoint))
        }
        guard isDirectory.boolValue else {
            throw CommandFailure("mount point '\(configuration.mountPoint)' is not a directory")
        }
        if MountTable.isMountPoint(configuration.mountPoint) {
            throw CommandFailure("'\(configuration.mountPoint)' is already a mount point")
        }
        if let entries = try? fileManager.contentsOfDirectory(atPath: configuration.mountPoint), !entries.isEmpty {
            throw CommandFailure("mount point '\(configuration.mountPoint)' is not empty")
        }
        let backing = URL(fileURLWithPath: configuration.backing).resolvingSymlinksInPath().path
        let mountPoint = URL(fileURLWithPath: configuration.mountPoint).resolvingSymlinksInPath().path
        if backing == mountPoint || backing.hasPrefix(mountPoint + "/") {
            throw CommandFailure("backing directory '\(configuration.backing)' is inside the mount point")
        }
        if mountPoint.hasPrefix(backing + "/") {
            throw CommandFailure("mount point '\(configuration.mountPoint)' is inside the backing directory")
        }
        if !configuration.allowsOverlap { try MountTable.refuseOverlap(of: backing, joining: configuration.cluster) }
        for rule in configuration.modeRules where rule.pattern.isEmpty {
            throw CommandFailure("an empty path pattern in the mode rules")
        }
        try checkFuseDevice()
        // Raised here too: the daemon inherits the limit from this process.
        let limit = DescriptorLimit.raise()
        if let budget = configuration.descriptorBudget, DescriptorLimit.budget(budget, under: limit) == nil {
            throw CommandFailure(DescriptorLimit.refusal(of: "--descriptor-budget \(budget)", under: limit))
        }
    }

    /// Why `path` cannot be seen: "does not exist", or what stat(2) says instead (a directory
    /// on the way the caller may not search, say).
    static func whyMissing(_ path: String) -> String {
        var info = stat()
        do throws(Errno) { _ = try check(stat(path, &info)) } catch {
            if error != .noSuchFileOrDirectory { return "cannot be reached: \(error.description)" }
        }
        return "does not exist"
    }

    /// What a mount needs of the system, said plainly where libfuse would print its own line and
    /// ours would add only "could not mount".
    static func checkFuseDevice() throws {
        guard access("/dev/fuse", F_OK) == 0 else {
            throw CommandFailure("there is no /dev/fuse: the fuse module is not loaded (as root: modprobe fuse)")
        }
        guard geteuid() != 0 else { return }
        do throws(Errno) { _ = try check(access("/dev/fuse", R_OK | W_OK)) } catch {
            throw CommandFailure(
                "cannot open /dev/fuse (\(error.description)): a user mounts through it, and here it is not open to uid "
                    + "\(geteuid()); as root, `chmod 0666 /dev/fuse` opens it to all, as most systems leave it")
        }
        guard FileManager.default.isExecutableFile(atPath: Unmount.fusermount3) else {
            throw CommandFailure("fusermount3 is not installed (package fuse3): a user mounts and unmounts through it")
        }
    }

    /// Mounts and serves until unmounted; with COORDFS_READY_PIPE set, tells the parent once ready.
    private func serve(_ configuration: MountConfiguration, log logFile: String?) throws {
        let notifyParent = ProcessInfo.processInfo.environment["COORDFS_NOTIFY_READY"] == "1"
        var configuration = configuration
        configuration.mountPoint = URL(fileURLWithPath: configuration.mountPoint).resolvingSymlinksInPath().path
        // Detached from its terminal (below), the daemon logs to the system log unless given a
        // file; set before the session is made, whose parts take their loggers as they are made.
        if notifyParent, logFile == nil, let systemLog = SystemLog(mountPoint: configuration.mountPoint) {
            LoggingSystem.bootstrap { _ in SystemLog.Handler(destination: systemLog) }
        }
        let session = try MountSession(configuration: configuration)
        session.startControlSocket = { try MountControlServer.start(for: $0) }
        let membership = try configuration.cluster.map { cluster in
            try ClusterJoin.join(
                endpoints: cluster.endpoints, credentials: cluster.credentials, store: cluster.store,
                host: cluster.host, ttl: cluster.ttl,
                whenUnreachable: cluster.aloneWhenUnreachable ? .local : .refuse,
                breakTime: configuration.breakTime ?? configuration.waitTimeout, clusterKey: cluster.clusterKey,
                as: .mount(session.filesystem))
        }
        do {
            try session.mount()
        } catch {
            membership?.leave()
            throw CommandFailure("\(error)")
        }
        session.beforeUnmount = { membership?.leave() }
        if let membership, let socket = session.controlSocket as? MountControlServer {
            membership.serveStatus(through: socket.server)
        }
        if notifyParent {
            FileHandle.standardOutput.write(Data("ready\n".utf8))
            // Detach from the parent's pipes and terminal.
            let target =
                logFile.map { Glibc.open($0, O_WRONLY | O_CREAT | O_APPEND, 0o644) }
                ?? Glibc.open("/dev/null", O_WRONLY)
            let null = Glibc.open("/dev/null", O_RDONLY)
            dup2(null, 0); dup2(target, 1); dup2(target, 2)
            close(null); close(target)
        }
        let result = session.run()
        if result < 0 { throw ExitCode(1) }
    }

    /// Starts `coordfs mount … -f` as a daemon in its own session and waits until it is ready.
    private func spawnDaemon() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        // As parsed (`CoordFS.arguments`: a mount helper's flags are translated), less --verbose.
        var arguments = CoordFS.arguments(from: CommandLine.arguments).filter { $0 != "--verbose" }
        if arguments.first != "mount" { arguments.insert("mount", at: 0) }
        arguments.append("-f")
        process.arguments = ["daemon-start"] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_NOTIFY_READY"] = "1"
        process.environment = environment
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let line = output.fileHandleForReading.readLine()
        if line == "ready" { return }
        process.waitUntilExit()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        throw CommandFailure(
            message.isEmpty ? "the mount did not start" : message.replacingOccurrences(of: "Error: ", with: ""))
    }
}

/// Starts a new session (no controlling terminal), then runs the mount in the foreground.
struct DaemonStart: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "daemon-start", shouldDisplay: false)

    @Argument(parsing: .captureForPassthrough) var arguments: [String] = []

    func run() throws {
        _ = setsid()
        // SIGTERM and SIGINT must reach the mount's handlers, whatever spawned us.
        Signals.resetInherited()
        var command = try CoordFS.parseAsRoot(arguments)
        try command.run()
    }
}

extension FileHandle {
    /// Reads up to a newline (without it); nil at end of file.
    func readLine() -> String? {
        var bytes: [UInt8] = []
        while true {
            guard let chunk = try? read(upToCount: 1), let byte = chunk.first else {
                return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
    }
}

enum MountCommandLimits {
    /// Threads serving kernel requests: libfuse starts them as requests overlap.
    static let threads = 1...256
    /// Nice values, as setpriority(2) takes them.
    static let nice = -20...19
}
