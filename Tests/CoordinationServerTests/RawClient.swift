import LinuxSystem
@testable import CoordinationServer
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A client of a control socket that speaks the protocol line by line, for tests that look at
/// what the server sends and when it closes.
final class RawClient {
    let fd: Int32
    private var pending: [UInt8] = []
    private var isOpen = true

    /// A read waits at most 10 s (then `receive` says nil): a test that waits for a line that
    /// never comes fails instead of hanging.
    init(_ path: String) throws {
        fd = try UnixSocket.connect(to: path)
        var limit = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Closes the connection now (once: a descriptor closed twice may close another's).
    func close() {
        if isOpen { Glibc.close(fd) }
        isOpen = false
    }

    deinit { close() }

    func send(_ message: ClientMessage) {
        let line = WireCodec.encode(message)
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// The next line from the server, or nil once it has closed the connection (or sent
    /// nothing for 10 s).
    func receive() throws -> ServerMessage? {
        while true {
            if let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(pending[..<end])
                pending.removeSubrange(...end)
                return try WireCodec.decodeServer(line)
            }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { return nil }
            pending += buffer[..<count]
        }
    }

    /// Sends `message` and returns the reply.
    func ask(_ message: ClientMessage) throws -> ServerMessage? {
        send(message)
        return try receive()
    }

    /// Says hello; true when the server greets back.
    func greet() throws -> Bool {
        guard case .ok(id: 1, _)? = try ask(.hello(id: 1, version: WireProtocol.version)) else { return false }
        return true
    }
}
