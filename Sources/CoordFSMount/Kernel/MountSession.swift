import LinuxSystem
import CFuse3
import CLinux
import CFusePassthrough
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: set up on one thread before `run`; `stop` only signals.
/// A mounted coordfs: create it, `mount()`, `run()` until it is unmounted or signalled, and it
/// cleans up after itself.
public final class MountSession: @unchecked Sendable {
    public let filesystem: Filesystem
    private var session: OpaquePointer?
    private var handlesSignals = false
    /// Watches the backing directory from the mount on (`BackingWatch`): a change made behind
    /// it as soon as it is mounted is seen.
    private var backingWatch: BackingWatch?
    /// Starts serving this mount's control socket, where the configuration serves one: `mount()`
    /// calls it once the FUSE session is made and before the mount is. The commands give it the
    /// control server (`MountControlServer`), so that the mount knows nothing of the socket's
    /// protocol; it throws when the socket cannot be served, and then no mount is made.
    public var startControlSocket: ((Filesystem) throws -> any MountControlSocket)?
    /// The control socket of this mount, once mounted.
    public private(set) var controlSocket: (any MountControlSocket)?
    /// Gives the allocator's free memory back once the mount has gone quiet, as the daemon
    /// does once its last client has gone.
    private var quietTrim: QuietTrim?

    /// The version of the libfuse this program runs with.
    public static var libfuseVersion: String { String(cString: fuse_pkgversion()) }

    /// What the mount did to fit the kernel's FUSE request timeout, if one is in force.
    public let requestTimeoutNote: String?

    public init(
        configuration given: MountConfiguration, domain: CoordinationDomain = .shared,
        requestTimeout: KernelRequestTimeout? = .inForce()
    ) throws {
        var configuration = given
        requestTimeoutNote = configuration.fitWaits(within: requestTimeout)
        domain.presenterTimeout = configuration.presenterTimeout
        // A presenter still working may make an access wait up to the break time (as a lease
        // holder may), and no longer: the break time is fitted to the kernel's request timeout.
        domain.presenterWorkLimit = max(
            configuration.presenterTimeout, configuration.breakTime ?? configuration.presenterTimeout)
        domain.vetoScope = configuration.vetoScope
        // The program a presenter refused knows only its errno: the log names who refused it.
        domain.logsRefusals = true
        domain.packageExtensions = configuration.packageExtensions
        filesystem = try Filesystem(configuration: configuration, domain: domain)
        if domain.reportHandler == nil {
            let statistics = filesystem.statistics
            domain.reportHandler = { report in
                if case .presenterDidNotAnswer = report { statistics.presenterTimeouts.add(1, ordering: .relaxed) }
            }
        }
    }

    /// The mount's source, as mount, df and findmnt show it: the backing directory's real path,
    /// or "coordfs" where the path holds what FUSE's option list could misread. (`-o fsname=`
    /// replaces it: coordfs commands ask a mount what it is, through its control socket.)
    static func source(of backing: String) -> String {
        let path = URL(fileURLWithPath: backing).resolvingSymlinksInPath().path
        return path.hasPrefix("/") && !path.contains(where: { $0 == "," || $0 == "\\" || $0 == "=" || $0.isNewline })
            ? path : "coordfs"
    }

    /// Mounts at the configuration's mount point. With `handlingSignals`, SIGINT, SIGTERM and
    /// SIGHUP end `run()` and unmount.
    public func mount(handlingSignals: Bool = true) throws {
        IdleTrim.limitArenas()
        let configuration = filesystem.configuration
        var options =
            ["fsname=" + Self.source(of: configuration.backing), "subtype=coordfs"] + configuration.fuseOptions
        if configuration.kernelChecksPermissions && !options.contains("default_permissions") {
            options.append("default_permissions")
        }
        let arguments = ["coordfs", "-o", options.joined(separator: ",")]
        var cArguments = arguments.map { strdup($0) }
        defer { cArguments.forEach { free($0) } }
        var ops = FuseBridge.operations()
        let userdata = Unmanaged.passUnretained(filesystem).toOpaque()
        session = cArguments.withUnsafeMutableBufferPointer { buffer -> OpaquePointer? in
            var args = fuse_args(argc: Int32(buffer.count), argv: buffer.baseAddress, allocated: 0)
            defer { fuse_opt_free_args(&args) }
            return cfs_session_new(&args, &ops, userdata)
        }
        guard let session else { throw MountError.fuse("could not create the FUSE session (bad -o option?)") }
        if handlingSignals {
            guard fuse_set_signal_handlers(session) == 0 else {
                throw MountError.fuse("could not install signal handlers")
            }
            handlesSignals = true
        }
        // The control socket first: a mount without it would coordinate with no presenter or
        // Swift program, and they would not know (they find the socket through the mount).
        if configuration.servesControlSocket {
            do {
                guard let startControlSocket else {
                    throw MountError.invalid("no control server was given to serve it")
                }
                let socket = try startControlSocket(filesystem)
                controlSocket = socket
                filesystem.socketPath = socket.path
            } catch {
                abandon(session)
                throw MountError.fuse("cannot serve the control socket: \(error)")
            }
        }
        guard fuse_session_mount(session, configuration.mountPoint) == 0 else {
            abandon(session)
            throw MountError.fuse("could not mount on \(configuration.mountPoint)")
        }
        // Hooked before the loop reads the kernel's INIT, which is waiting already.
        let hooked = cfs_session_hook_device(UnsafeMutableRawPointer(session))
        filesystem.session.store(UnsafeMutableRawPointer(session), ordering: .relaxed)
        backingWatch = filesystem.watchBacking()
        backingWatch?.start()
        let statistics = filesystem.statistics, socket = controlSocket
        quietTrim = IdleTrim.whenQuiet { statistics.work + (socket?.linesRead ?? 0) }
        if hooked == 0 {
            filesystem.passthrough?.enable(device: fuse_session_fd(session))
        } else {
            filesystem.logger.warning(
                "device hooks not installed (no kernel passthrough): \(String(cString: strerror(-hooked)))")
        }
    }

    /// Undoes what `mount` made before it failed: the signal handlers, the session, the
    /// control socket.
    private func abandon(_ session: OpaquePointer) {
        if handlesSignals { fuse_remove_signal_handlers(session) }
        fuse_session_destroy(session)
        self.session = nil
        controlSocket?.stop()
        controlSocket = nil
    }

    /// Runs once the session stops serving, before it unmounts: what must still answer waiting
    /// requests ends there (a cluster's membership).
    public var beforeUnmount: (@Sendable () -> Void)?

    /// Serves requests until unmounted or signalled; then unmounts and tears down.
    @discardableResult
    public func run() -> Int32 {
        guard let session else { return -1 }
        let threads = max(filesystem.configuration.maxThreads, 1)
        // libfuse's workers start from this thread and from each other, and keep its value;
        // restored after, for a caller that runs a mount on a thread of its own.
        let nice = filesystem.configuration.serveNice, before = cfs_thread_nice()
        filesystem.statistics.workerNice.store(nice != 0 ? cfs_set_thread_nice(nice) : before, ordering: .relaxed)
        // Modes are the caller's: the kernel has applied the caller's umask to every mode it
        // sends, and the daemon's own must not be applied again (it made 0662 under umask 0
        // 0640). The serving threads get a filesystem context of their own with umask 0, so the
        // rest of the process (a test's, say) keeps its umask.
        let maskBefore = cfs_own_umask_zero()
        let result = cfs_session_loop_mt(session, threads, min(threads, 4))
        // Requests still waiting are answered while the session (and its io_uring queues) can.
        beforeUnmount?()
        backingWatch?.requestStop()
        quietTrim?.stop()
        quietTrim = nil
        if maskBefore >= 0 { umask(mode_t(maskBefore)) }
        if nice != 0 { _ = cfs_set_thread_nice(before) }
        controlSocket?.stop()
        if handlesSignals { fuse_remove_signal_handlers(session) }
        // The io_uring queues serve this session: they end before it does, and before the
        // unmount, which closes the session's descriptor (the queues are found by it). Stopped
        // after it, with -1, none stopped: their lane threads lived on, and a queue thread
        // could serve a late request with the filesystem gone.
        cfs_ring_stop(fuse_session_fd(session))
        // No notification starts from here; one under way ends with the unmount (its lock's
        // holder is answered ENOTCONN) before the session it uses is freed.
        filesystem.session.store(nil, ordering: .relaxed)
        fuse_session_unmount(session)
        // No version is kept from here: the lines the store's queue gathers are written before
        // `run` returns, and the process perhaps ends (else they would be lost with it).
        filesystem.versions?.store.flush()
        backingWatch?.waitUntilStopped()
        filesystem.watchedWrites.end()
        backingWatch = nil
        fuse_session_destroy(session)
        self.session = nil
        return result
    }

    /// Ends `run()` from another thread of this process (tests): unmounts lazily so the loop's
    /// reads end.
    public func stop() {
        controlSocket?.stop()
        if let session { fuse_session_exit(session) }
        _ = umount2(filesystem.configuration.mountPoint, Int32(MNT_DETACH))
    }
}

/// A mount's control socket as its session sees it: started for the session by whoever gives
/// it the server (`MountSession.startControlSocket`), stopped by the session as the mount ends.
public protocol MountControlSocket: AnyObject, Sendable {
    /// Where it listens: answered as `user.coordfs.socket` on every item.
    var path: String { get }
    /// Lines read from its clients so far: the mount's work includes its socket's
    /// (`IdleTrim.whenQuiet`).
    var linesRead: Int { get }
    /// Stops accepting, ends every connection and removes the socket file (the session may
    /// call it more than once).
    func stop()
}
