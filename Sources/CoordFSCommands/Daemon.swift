import LinuxSystem
import ArgumentParser
import CoordFSMount
import CoordinationServer
import FileCoordination
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
        systemd when it ends.
        """
    )

    @Option(help: "The socket path (default: /run/coordfs/daemon.sock as root, else under $XDG_RUNTIME_DIR/coordfs).")
    var socket: String?

    @Flag(help: "Let every user connect (socket mode 0666); permission checks still apply per item.")
    var allowOthers = false

    @Option(help: ArgumentHelp("End once no client has been connected for this many seconds.", valueName: "seconds"))
    var exitWhenIdle: Int?

    func validate() throws {
        if let exitWhenIdle, exitWhenIdle < 1 || exitWhenIdle > 86_400 * 365 {
            throw ValidationError("--exit-when-idle must be between 1 second and a year")
        }
    }

    func run() throws {
        // Block the signals before any thread starts, so only sigwait below receives them (and
        // ignored ones, left so by whatever spawned us, are not discarded).
        Signals.resetInherited()
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGHUP)     // its terminal closed: end as cleanly (the socket goes)
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
        let lock: Int32
        do throws(Errno) {
            lock = try check(open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600))
            _ = try check(flock(lock, LOCK_EX | LOCK_NB))
        } catch {
            if error == .wouldBlock { throw CommandFailure("cannot serve \(path): another coordfs server listens there") }
            throw CommandFailure("cannot lock \(path).lock: \(error.description)")
        }
        let domain = CoordinationDomain.shared
        let server = ControlServer(socketPath: path, mode: allowOthers ? 0o666 : 0o600, domain: domain,
                                   resolver: HostItemResolver(domain: domain), root: "/")
        server.trimsMemoryWhenIdle = true
        if let activated {
            server.start(listeningOn: activated.fd)
        } else {
            do { try server.start() } catch { throw CommandFailure("cannot serve \(path): \(error)") }
        }
        FileHandle.standardError.write(Data("coordfs daemon: serving \(path)\(activated == nil ? "" : " (socket from systemd)")\n".utf8))
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
        close(lock)
    }
}
