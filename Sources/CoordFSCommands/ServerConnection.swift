import CoordinationClient
import Foundation

/// Finding and reaching the control socket that serves a path, for every command that needs one.
enum ServerConnection {
    /// `path` made absolute with symbolic links resolved, as the server expects it.
    static func resolve(_ path: String) -> String {
        URL(fileURLWithPath: Mount.absolute(path)).resolvingSymlinksInPath().path
    }

    /// The socket serving `path`: `explicit` when given, else the mount's, else the user's
    /// daemon, started if none runs (`ControlClient.serverSocket`).
    static func socket(for path: String, explicit: String?) throws -> String {
        if let explicit { return explicit }
        try MountTable.refuseAbandoned(path)
        try MountTable.refusePrivate(path)
        try MountTable.refuseBacking(path)
        switch ControlClient.serverSocket(for: path) {
        case .success(let socket): return socket
        case .failure(let error): throw CommandFailure(error.message)
        }
    }

    /// The error for a command whose server closed its connection: which server, and why that
    /// happens.
    static func closed(_ client: ControlClient) -> CommandFailure {
        guard case .string(let root)? = client.server["root"], root != "/" else {
            return CommandFailure("the coordfs daemon closed the connection (it has ended)")
        }
        return CommandFailure(
            "the coordfs mount at '\(root)' closed the connection (it was unmounted, or its daemon ended)")
    }

    /// A connected, greeted client of the socket serving `path`.
    static func connect(for path: String, explicit: String?) throws -> ControlClient {
        let socket = try socket(for: path, explicit: explicit)
        do { return try ControlClient(socketPath: socket) } catch { throw CommandFailure("\(error)") }
    }
}
