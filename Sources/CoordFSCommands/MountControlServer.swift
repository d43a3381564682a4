import CoordFSMount
import CoordinationServer

/// A mount's control socket, served by the control server: the commands give it to a mount's
/// session (`MountSession.startControlSocket`), which starts it before the mount is made and
/// stops it as the mount ends. Here, so that the mount knows nothing of the server.
package final class MountControlServer: MountControlSocket {
    package let server: ControlServer

    private init(_ server: ControlServer) { self.server = server }

    package var path: String { server.socketPath }

    package var linesRead: Int { server.linesRead }

    /// Stops serving, and lets go of the filesystem (`remount`).
    package func stop() {
        server.stop()
        server.remount = nil
    }

    /// Serves `filesystem`'s control socket: at the configuration's path, or one of the mount's
    /// own (`ControlServer.mountSocketPath`); open to every user where the mount is.
    package static func start(for filesystem: Filesystem) throws -> MountControlServer {
        let configuration = filesystem.configuration
        let path = try configuration.socketPath ?? ControlServer.mountSocketPath()
        let server = ControlServer(
            socketPath: path, mode: configuration.allowsOthers ? 0o666 : 0o600,
            domain: filesystem.domain, resolver: filesystem.itemResolver,
            root: filesystem.mountRoot.string)
        server.claimGate = filesystem.claimGate
        // Its holds wait as the mount's requests do: as long, and past other users'
        // holds at the break time.
        server.waitTimeout = configuration.waitTimeout
        server.holdWaits = filesystem.socketHoldWaits
        server.versions = filesystem.versionStore
        // Held until `stop()`, not weakly: a weak reference gives an object a side table, and
        // every request thread's retain of the filesystem would go through it.
        server.remount = { options in filesystem.remount(options) }
        try server.start()
        return MountControlServer(server)
    }
}
