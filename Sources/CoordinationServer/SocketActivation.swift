import LinuxSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A listening socket handed over by systemd (socket activation, `sd_listen_fds(3)`): the
/// daemon can then be a user service that starts on its first client, with systemd keeping the
/// socket while no daemon runs.
public enum SocketActivation {
    /// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
    static let firstDescriptor: Int32 = 3

    /// The listening Unix stream socket passed to this process, with the path it is bound to;
    /// nil when none was (no `LISTEN_FDS`, or one meant for another process). The variables are
    /// taken out of the environment, so that no child takes the socket for its own.
    public static func listener() throws -> (fd: Int32, path: String)? {
        let environment = ProcessInfo.processInfo.environment
        guard let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
            let count = environment["LISTEN_FDS"].flatMap({ Int($0) })
        else { return nil }
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
        guard count == 1 else {
            throw SocketError(
                call: "socket activation", code: EINVAL, detail: "\(count) sockets were passed; the daemon takes one")
        }
        let fd = firstDescriptor
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        guard let path = listeningPath(of: fd) else {
            throw SocketError(
                call: "socket activation", code: ENOTSOCK,
                detail: "descriptor 3 is not a listening Unix stream socket bound to a path")
        }
        return (fd, path)
    }

    /// The path a listening Unix stream socket is bound to; nil for anything else.
    private static func listeningPath(of fd: Int32) -> String? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &length) == 0, value == 1 else { return nil }
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &length) == 0, value == Int32(SOCK_STREAM.rawValue) else {
            return nil
        }
        var address = sockaddr_un()
        var size = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) }
        }
        guard named == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: &address.sun_path) { raw -> String in
            let bytes = raw.prefix(while: { $0 != 0 })
            return String(decoding: bytes, as: UTF8.self)
        }
        return path.hasPrefix("/") ? path : nil
    }
}
