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
        discussion: "Clients find it at --socket, $COORDFS_SOCKET, or the default path printed at start."
    )

    @Option(help: "The socket path (default: /run/coordfs/daemon.sock as root, else under $XDG_RUNTIME_DIR/coordfs).")
    var socket: String?

    @Flag(help: "Let every user connect (socket mode 0666); permission checks still apply per item.")
    var allowOthers = false

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
        let path: String
        do { path = try socket ?? ControlServer.defaultSocketPath(name: "daemon") } catch { throw CommandFailure("cannot serve: \(error)") }
        let domain = CoordinationDomain.shared
        let server = ControlServer(socketPath: path, mode: allowOthers ? 0o666 : 0o600, domain: domain,
                                   resolver: HostItemResolver(domain: domain), root: "/")
        do { try server.start() } catch { throw CommandFailure("cannot serve \(path): \(error)") }
        FileHandle.standardError.write(Data("coordfs daemon: serving \(path)\n".utf8))
        // Wait for SIGINT, SIGTERM or SIGHUP, then remove the socket.
        var received: Int32 = 0
        sigwait(&signals, &received)
        server.stop()
    }
}
