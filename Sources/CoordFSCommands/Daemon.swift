import LinuxSystem
import ArgumentParser
import Coordination
import CoordinationRuntime
import CoordFSMount
import CoordinationServer
import CoordinationWire
import FileCoordination
import FileVersions
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs daemon`: the control socket's protocol for coordination outside any mount.
struct Daemon: ParsableCommand {

    static let configuration = CommandConfiguration(
        abstract: "Serve the control socket for coordination outside any mount (foreground).",
        discussion: """
            Clients find it at --socket, $COORDFS_SOCKET, or the default path printed at start. Swift programs \
            using FileCoordination and `coordfs coordinate` start one for the user where none runs, with \
            --exit-when-idle; one daemon serves a socket at a time (the others end at once). Started by systemd \
            with a socket (socket activation: LISTEN_FDS), it serves that socket instead, and leaves it to \
            systemd when it ends. \
            Exit status: 0 when SIGINT, SIGTERM or SIGHUP ends it, or --exit-when-idle; 1 when it \
            cannot serve (another server listens there, say), with the reason on standard error; 64 \
            for a command line it cannot take.
            """
    )

    @Option(help: "The socket path (default: /run/coordfs/daemon.sock as root, else under $XDG_RUNTIME_DIR/coordfs).")
    var socket: String?

    @Flag(help: "Let every user connect (socket mode 0666); permission checks still apply per item.")
    var allowOthers = false

    @Option(help: ArgumentHelp("End once no client has been connected for this many seconds.", valueName: "seconds"))
    var exitWhenIdle: Int?

    @Option(
        help: ArgumentHelp(
            "Where the versions programs add of items outside any mount are kept (FileVersion.addOfItem; default: $XDG_DATA_HOME/coordfs, else ~/.local/share/coordfs, or /var/lib/coordfs as root).",
            valueName: "directory"))
    var versionsDirectory: String?

    @OptionGroup(title: "Hosts that share a store")
    var clusterOptions: ClusterOptions

    @Option(
        help: ArgumentHelp(
            "With --cluster: the shared store's directory on this host, which the daemon's clients use directly (an NFS or CephFS mount, say). Their holds and presenters inside it coordinate with the store's other hosts.",
            valueName: "directory"))
    var clusterDirectory: String?

    @Option(
        help: ArgumentHelp(
            "With --cluster: seconds another host's access waits at most for this host's holds that conflict with it, as a mount's --break-time (default 45).",
            valueName: "seconds"))
    var breakTime: Double?

    func validate() throws {
        if let exitWhenIdle, exitWhenIdle < 1 || exitWhenIdle > 86_400 * 365 {
            throw ValidationError("--exit-when-idle must be between 1 second and a year")
        }
        guard clusterOptions.cluster != nil else {
            let given =
                clusterOptions.firstGiven
                ?? [("--cluster-directory", clusterDirectory != nil), ("--break-time", breakTime != nil)]
                .first(where: \.1)?.0
            if let given { throw ValidationError("\(given) is for a daemon with --cluster") }
            return
        }
        guard clusterDirectory != nil else {
            throw ValidationError("--cluster needs --cluster-directory DIR: the shared store's directory on this host")
        }
        _ = try clusterOptions.setting()
        _ = try Seconds.duration(breakTime ?? 45, option: "--break-time")
    }

    func run() throws {
        // Block the signals before any thread starts, so only sigwait below receives them (and
        // ignored ones, left so by whatever spawned us, are not discarded).
        Signals.resetInherited()
        IdleTrim.limitArenas()
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGHUP)  // its terminal closed: end as cleanly (the socket goes)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        // A connection is a descriptor: a soft limit of 1024, many systems' default, would
        // refuse the thousandth client.
        DescriptorLimit.raise()
        let activated: (fd: Int32, path: String)?
        do { activated = try SocketActivation.listener() } catch { throw CommandFailure("cannot serve: \(error)") }
        let path: String
        do { path = try activated?.path ?? socket ?? ControlServer.defaultSocketPath(name: "daemon") } catch {
            throw CommandFailure("cannot serve: \(error)")
        }
        // One daemon a socket: two started at once for one user would otherwise race to bind it.
        let lockPath = path + ".lock"
        let lock: Int32
        do throws(Errno) { lock = try Self.lock(lockPath) } catch {
            if error == .wouldBlock {
                throw CommandFailure("cannot serve \(path): another coordfs server listens there")
            }
            throw CommandFailure("cannot lock \(lockPath): \(error.description)")
        }
        // Kept until the very end: a daemon started after this one ends serves only once this
        // one has left its cluster (the deferred `leave` runs first). Removed while still
        // locked, so that it is left behind only by a daemon that was killed.
        defer {
            unlink(lockPath)
            close(lock)
        }
        let domain = CoordinationDomain.shared
        let server = ControlServer(
            socketPath: path, mode: allowOthers ? 0o666 : 0o600, domain: domain,
            resolver: HostItemResolver(domain: domain), root: "/")
        server.trimsMemoryWhenIdle = true
        server.versions = try openVersions()
        // A host of a shared store joins its cluster before it serves: no hold is granted
        // that its delegations do not cover.
        let membership = try clusterOptions.setting().map { try joinCluster($0, domain: domain, server: server) }
        defer { membership?.leave() }
        if let activated {
            server.start(listeningOn: activated.fd)
        } else {
            do { try server.start() } catch { throw CommandFailure("cannot serve \(path): \(error)") }
        }
        FileHandle.standardError.write(
            Data("coordfs daemon: serving \(path)\(activated == nil ? "" : " (socket from systemd)")\n".utf8))
        // Wait for SIGINT, SIGTERM or SIGHUP (or idleness), then remove the socket.
        if let exitWhenIdle {
            var idleSince = ContinuousClock.now
            var second = timespec(tv_sec: 1, tv_nsec: 0)
            while sigtimedwait(&signals, nil, &second) < 0 {
                if server.clientCount > 0 { idleSince = .now; continue }
                if ContinuousClock.now - idleSince >= .seconds(exitWhenIdle) { break }
            }
        } else {
            var received: Int32 = 0
            sigwait(&signals, &received)
        }
        server.stop()
        // The lines of versions added last, gathered by the store's queue, before the process ends.
        server.versions?.flush()
    }

    /// `path` opened (made where missing) and locked, for this daemon alone; `.wouldBlock` when
    /// another holds it. A daemon ending removes the file before it lets go of it, so a daemon
    /// that opened it just before may lock a file no longer there: it opens it again, lest it
    /// and a third, which makes a new one, both serve.
    static func lock(_ path: String) throws(Errno) -> Int32 {
        while true {
            let fd = try check(open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600))
            do throws(Errno) { _ = try check(flock(fd, LOCK_EX | LOCK_NB)) } catch {
                close(fd)
                throw error
            }
            var held = stat(), named = stat()
            if fstat(fd, &held) == 0, stat(path, &named) == 0, held.st_dev == named.st_dev, held.st_ino == named.st_ino
            {
                return fd
            }
            close(fd)
        }
    }

    /// The store of versions of items outside any mount, made where missing. Without one (a
    /// user with no home, say) the daemon still coordinates, and says why it keeps no versions;
    /// only a directory given with --versions-directory must serve.
    private func openVersions() throws -> VersionStore? {
        let directory = versionsDirectory ?? Self.defaultVersionsDirectory()
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { throw Errno.ofFailedCall() }
            defer { close(fd) }
            return try VersionStore(in: fd)
        } catch {
            let why =
                "cannot keep versions in '\(directory)': \((error as? Errno)?.description ?? error.localizedDescription)"
            if versionsDirectory != nil { throw CommandFailure(why) }
            FileHandle.standardError.write(
                Data("coordfs daemon: \(why); versions of items outside mounts are not kept\n".utf8))
            return nil
        }
    }

    /// $XDG_DATA_HOME/coordfs, else ~/.local/share/coordfs (the user's own home, whatever
    /// $HOME says), or /var/lib/coordfs as root.
    private static func defaultVersionsDirectory() -> String {
        if getuid() == 0 { return "/var/lib/coordfs" }
        if let data = ProcessInfo.processInfo.environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            return data + "/coordfs"
        }
        let home =
            getpwuid(getuid()).map { String(cString: $0.pointee.pw_dir) }
            ?? FileManager.default.homeDirectoryForCurrentUser.path
        return home + "/.local/share/coordfs"
    }

    /// Joins the cluster as the host of the store at --cluster-directory: its clients' holds of
    /// items inside it pass the host's delegations, its presenters there are asked and told of
    /// the other hosts' programs.
    private func joinCluster(
        _ cluster: ClusterSetting, domain: CoordinationDomain, server: ControlServer
    ) throws -> ClusterJoin {
        guard let directory = clusterDirectory, let resolved = realpath(directory, nil) else {
            throw CommandFailure("--cluster-directory '\(clusterDirectory ?? "")': \(Errno.ofFailedCall())")
        }
        let real = String(cString: resolved)
        free(resolved)
        var info = stat()
        guard stat(real, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, let root = ItemPath(real) else {
            throw CommandFailure("--cluster-directory '\(directory)' is not a directory")
        }
        let store = SharedStore(
            domain: domain, root: root,
            isDirectory: { path in
                var info = stat()
                return lstat(real + "/" + path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
            }, target: { path, _ in domain.locator.target(for: path) })
        let host = ClusterHost(
            store: store, seesChangesBehind: { false },
            grantsUnder: { server.claimGate = DelegationGate(store: store, delegations: $0) })
        let membership = try ClusterJoin.join(
            endpoints: cluster.endpoints, credentials: cluster.credentials, store: cluster.store, host: cluster.host,
            ttl: cluster.ttl,
            whenUnreachable: cluster.aloneWhenUnreachable ? .local : .refuse,
            breakTime: try Seconds.duration(breakTime ?? 45, option: "--break-time"), clusterKey: cluster.clusterKey,
            as: host)
        membership.serveStatus(through: server)
        return membership
    }
}
