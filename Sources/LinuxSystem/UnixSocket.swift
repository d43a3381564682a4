import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The few socket calls the control socket needs, with errno turned into `SocketError` once.
package struct SocketError: Error, CustomStringConvertible {
    package let call: String
    package let code: Int32
    /// Said instead of strerror's text when given.
    package var detail: String? = nil
    package init(call: String, code: Int32, detail: String? = nil) {
        self.call = call
        self.code = code
        self.detail = detail
    }
    package var description: String { "\(call): \(detail ?? String(cString: strerror(code)))" }
}

/// The credentials of the process at the other end (SO_PEERCRED), and its groups.
public struct PeerCredentials: Sendable, Hashable {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32
    public let groups: Set<UInt32>

    package init(pid: Int32, uid: UInt32, gid: UInt32, groups: Set<UInt32>) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }
}

package enum UnixSocket {
    package static let peerCredentialsOption: Int32 = 17  // SO_PEERCRED on Linux

    package static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) throws -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw SocketError(call: "socket path too long", code: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    /// A listening socket at `path` with `mode`. A socket file that a server which has died left
    /// there is replaced; one that a live server listens on is not (EADDRINUSE): replaced, that
    /// server would go on serving the clients it has while new ones reached this one, and
    /// coordination would be split in two without a word.
    package static func listen(at path: String, mode: mode_t) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", code: errno) }
        var bound = try withAddress(path) { bind(fd, $0, $1) }
        if bound != 0 && errno == EADDRINUSE {
            if let live = try? connect(to: path) {
                close(live)
                close(fd)
                throw SocketError(
                    call: "bind \(path)", code: EADDRINUSE, detail: "another coordfs server listens there")
            }
            unlink(path)
            bound = try withAddress(path) { bind(fd, $0, $1) }
        }
        guard bound == 0 else { let code = errno; close(fd); throw SocketError(call: "bind \(path)", code: code) }
        chmod(path, mode)
        guard Glibc.listen(fd, 64) == 0 else {
            let code = errno; close(fd); throw SocketError(call: "listen", code: code)
        }
        return fd
    }

    /// A connected client socket.
    package static func connect(to path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", code: errno) }
        let result = try withAddress(path) { Glibc.connect(fd, $0, $1) }
        guard result == 0 else { let code = errno; close(fd); throw SocketError(call: "connect \(path)", code: code) }
        return fd
    }

    package static func peerCredentials(_ fd: Int32) -> PeerCredentials? {
        var raw = (Int32(0), UInt32(0), UInt32(0))
        var length = socklen_t(MemoryLayout.size(ofValue: raw))
        guard getsockopt(fd, SOL_SOCKET, peerCredentialsOption, &raw, &length) == 0 else { return nil }
        return PeerCredentials(pid: raw.0, uid: raw.1, gid: raw.2, groups: groups(of: raw.0, primary: raw.2))
    }

    /// The supplementary groups of a process, from /proc.
    package static func groups(of pid: Int32, primary: UInt32) -> Set<UInt32> {
        var result: Set<UInt32> = [primary]
        for field in ProcFile.statusFields(["Groups"], of: pid)?["Groups"]?.split(separator: " ") ?? [] {
            if let gid = UInt32(field) { result.insert(gid) }
        }
        return result
    }
}
