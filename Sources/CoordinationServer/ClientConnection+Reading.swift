import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Lines in: the connection's thread waits for input, frames it into lines and hands each to
/// `handle` (ClientConnection+Dispatch).
extension ClientConnection {
    /// Reads and handles lines until the client closes, errs or sends something malformed.
    func run() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let helloDeadline = ContinuousClock.now + server.counts.limits.helloTimeout
        reading: while true {
            // Asleep in poll, for input alone: a read blocked on the socket is woken too each time
            // the client takes in what was sent to it (the kernel wakes the socket's waiters when
            // its send space frees), once for every event a watcher reads: wakings that cost a
            // mount dear under a watcher hearing of every new file.
            var input = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            // Until its hello, a connection may wait only so long: it holds a thread and one of
            // its user's places.
            var timeout: Int32 = -1
            if !lock.withLock({ greeted }) {
                let left = helloDeadline - ContinuousClock.now
                let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                guard milliseconds > 0 else {
                    send(
                        .error(
                            id: nil, errno: "EPROTO", message: "no hello within \(server.counts.limits.helloTimeout)"))
                    break reading
                }
                timeout = Int32(min(milliseconds, Int64(Int32.max)))
            }
            let ready: Int32
            do throws(Errno) { ready = try check(poll(&input, 1, timeout)) } catch {
                if error == .interrupted { continue reading }
                break reading
            }
            if ready == 0 { continue }
            let count: Int
            do throws(Errno) {
                let received = try DescriptorPassing.receive(fd, into: &buffer)
                count = received.count
                // A descriptor rides on the first byte of its line: at most a few are pending
                // at once, and a client cannot hoard the server's descriptors.
                let refused = lock.withLock { () -> ArraySlice<Int32> in
                    let room = max(0, Self.pendingDescriptorLimit - receivedDescriptors.count)
                    receivedDescriptors += received.descriptors.prefix(room)
                    return received.descriptors.dropFirst(room)
                }
                for descriptor in refused { Glibc.close(descriptor) }
            } catch {
                break reading
            }
            if count <= 0 { break }
            pending += buffer[0..<count]
            do throws(WireError) {
                try WireLines.take(from: &pending) { line throws(WireError) in
                    server.readLines.add(1, ordering: .relaxed)
                    let message: ClientMessage
                    do throws(WireError) {
                        message = try WireCodec.decodeClient(line)
                    } catch {
                        // A request it can tell apart, malformed: refused alone, and the client goes on.
                        guard let id = error.refusedRequest, lock.withLock({ greeted }) else { throw error }
                        return send(.error(id: id, errno: "EINVAL", message: error.description))
                    }
                    try handle(message)
                }
            } catch {
                send(.error(id: nil, errno: "EPROTO", message: "\(error)"))
                break reading
            }
            if pending.isEmpty { closeReceivedDescriptors() }
            if pending.count > WireProtocol.maximumLineLength {
                send(
                    .error(
                        id: nil, errno: "EPROTO", message: "line longer than \(WireProtocol.maximumLineLength) bytes"))
                break
            }
        }
        closeReceivedDescriptors()
        close()
    }

    static let pendingDescriptorLimit = 4

    /// The oldest descriptor the client sent that no request has taken yet.
    func takeReceivedDescriptor() -> Int32? {
        lock.withLock { receivedDescriptors.isEmpty ? nil : receivedDescriptors.removeFirst() }
    }

    /// Closes the descriptors sent with lines that did not take them.
    private func closeReceivedDescriptors() {
        let left = lock.withLock { () -> [Int32] in
            defer { receivedDescriptors = [] }; return receivedDescriptors
        }
        for descriptor in left { Glibc.close(descriptor) }
    }
}
