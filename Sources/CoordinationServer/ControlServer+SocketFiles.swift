import LinuxSystem
import CoordinationRuntime
import CoordinationWire
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where servers put their sockets by default, and the sockets that servers which died left there.
extension ControlServer {
    /// A socket path for a server of this process: /run/coordfs when root, else the user's
    /// runtime directory. The directory is made if missing, and refused unless it is a
    /// directory of this user's that nobody else may write: whoever can replace a socket file
    /// there can take the clients that look it up (without $XDG_RUNTIME_DIR it lies in /tmp,
    /// where anyone may have made it first).
    public static func defaultSocketPath(name: String) throws -> String {
        let directory = WireProtocol.runtimeDirectory
        mkdir(directory, 0o755)
        var info = stat()
        do throws(Errno) { _ = try check(lstat(directory, &info)) } catch {
            throw SocketError(call: "the socket directory \(directory)", code: error.code)
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw SocketError(
                call: "the socket directory \(directory)", code: EPERM,
                detail: "it must be a directory owned by uid \(geteuid()) that nobody else may write "
                    + "(it has mode \(String(info.st_mode & 0o7777, radix: 8)), owner uid \(info.st_uid))")
        }
        return directory + "/" + name + ".sock"
    }

    /// The default socket path for a mount served by this process: `mount-PID-N.sock`, N
    /// counting the process's mounts (a test process serves many). Sockets that mounts whose
    /// process has died left in that directory are removed first: a daemon killed with
    /// SIGKILL cannot remove its own, and they would gather there.
    public static func mountSocketPath() throws -> String {
        let path = try defaultSocketPath(name: "mount-\(getpid())-\(mountsServed.add(1, ordering: .relaxed).oldValue)")
        removeAbandonedMountSockets(in: (path as NSString).deletingLastPathComponent)
        return path
    }

    private static let mountsServed = Atomic<Int>(0)

    /// Removes `mount-PID-N.sock` files whose process has ended and on which nobody listens.
    static func removeAbandonedMountSockets(in directory: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            guard name.hasPrefix("mount-"), name.hasSuffix(".sock"),
                let pid = Int32(name.dropFirst("mount-".count).prefix { $0.isNumber }), pid > 0,
                ProcFile.hasEnded(pid)
            else { continue }
            let path = directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else { continue }
            if let live = try? UnixSocket.connect(to: path) { Glibc.close(live); continue }
            unlink(path)
        }
    }
}
