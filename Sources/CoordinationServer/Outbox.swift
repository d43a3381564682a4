import LinuxSystem
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its queue is behind `lock`.
/// What the server has yet to write to one client, in order, and the thread that writes it.
///
/// `send` never blocks: a line is written at once on the caller's thread when the socket takes
/// it, so a request reaches its client without a hand-off to another thread. What the socket
/// does not take waits here, and the connection's writer thread (started the first time) writes
/// it as the client reads. A slow client must never hold up the access that sends to it.
///
/// A client that reads nothing for `stallLimit`, or lets more than `capacity` bytes pile up, or
/// more than its user's memory has room for (`UserMemory`, over all their connections), is
/// given up: the socket is shut down, and the connection's reader ends it as if it had closed
/// (its watches go, its unanswered requests count as consent, X4).
///
/// Lock order: the outbox's `condition`, then the user's counts (`UserCounts`).
final class Outbox: @unchecked Sendable {
    static let defaultCapacity = 8 << 20
    static let defaultStallLimit: Duration = .seconds(5)
    /// What waits is counted against the user's memory in steps of this many bytes: a line
    /// queued or written costs the counts' lock only when it crosses a step.
    static let chargeStep = 65_536

    private let fd: Int32
    private let capacity: Int
    private let stallLimit: Duration
    /// Whose memory what waits here is counted against; nil: nobody's.
    private let memory: UserMemory?
    /// Guards the state below; signalled when there is work for the writer, or it is done.
    private let condition = NSCondition()
    /// Unsent bytes are `pending[head...]`.
    private var pending: [UInt8] = []
    private var head = 0
    /// Descriptors to attach, each at the offset in `pending` of its line's first byte; owned
    /// here (duplicates of the callers').
    private var descriptors: [(offset: Int, descriptor: Int32)] = []
    /// The writer thread exists; it ends only once the outbox has ended.
    private var writerRunning = false
    /// The writer is waiting for room: the socket is full, so senders only queue.
    private var writerBusy = false
    private var ended = false
    /// What `memory` is charged now: what waits, rounded up to `chargeStep`.
    private var charged = 0

    init(
        fd: Int32, capacity: Int = Outbox.defaultCapacity, stallLimit: Duration = Outbox.defaultStallLimit,
        memory: UserMemory? = nil
    ) {
        self.fd = fd
        self.capacity = capacity
        self.stallLimit = stallLimit
        self.memory = memory
    }

    /// Sends `bytes`, with (a duplicate of) `descriptor` attached to the first byte unless it
    /// is -1: now, as far as the socket takes them, after anything still waiting. False once
    /// the client has been given up.
    @discardableResult
    func send(_ bytes: [UInt8], descriptor: Int32 = -1) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return false }
        if descriptor >= 0 { descriptors.append((pending.count, dup(descriptor))) }
        pending.append(contentsOf: bytes)
        if !writerBusy {
            while head < pending.count, writeSome() > 0 {}
            if ended { return false }
            if head == pending.count { reset(); return true }
        }
        if pending.count - head > capacity || !chargeForWaiting() { giveUp(); return false }
        wakeWriter()
        return true
    }

    /// Whether a line of `count` bytes could wait here now without passing the queue's
    /// capacity or its user's memory: a reply that would not is refused rather than sent, so
    /// that asking for it does not end the connection.
    func hasRoom(for count: Int) -> Bool {
        guard condition.withLock({ pending.count - head + count <= capacity }) else { return false }
        guard let memory else { return true }
        guard memory.take(count) == nil else { return false }
        memory.give(count)
        return true
    }

    /// How many bytes wait to be written.
    var queuedBytes: Int { condition.withLock { pending.count - head } }

    /// Stops sending: waits up to `grace` for what is queued to go (a last error line, say), then
    /// drops the rest and ends the writer. Nothing is written after this returns, so the caller
    /// may close the socket.
    func close(grace: Duration) {
        let deadline = Date(timeIntervalSinceNow: grace.timeInterval)
        condition.lock()
        while !ended && head < pending.count && condition.wait(until: deadline) {}
        if !ended { end() }
        while writerRunning { condition.wait() }
        condition.unlock()
    }

    // MARK: Writing (all with the lock held)

    private func wakeWriter() {
        if !writerRunning {
            writerRunning = true
            Thread.start(named: "coordfs-outbox \(fd)") { [self] in writeLoop() }
        }
        condition.broadcast()
    }

    /// The writer thread: writes what waits; when the socket is full, waits for room, and gives
    /// the client up if none comes for `stallLimit`.
    private func writeLoop() {
        condition.lock()
        var lastProgress = ContinuousClock.now
        while !ended {
            if head == pending.count {
                reset()
                writerBusy = false
                condition.broadcast()  // for close()
                condition.wait()
                lastProgress = .now
                continue
            }
            writerBusy = true
            if writeSome() > 0 { lastProgress = .now; continue }
            if ended { break }
            let left = stallLimit - (ContinuousClock.now - lastProgress)
            if left <= .zero { giveUp(); break }
            condition.unlock()
            var room = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&room, 1, Int32(max(1, min(left.timeInterval * 1000, 1000))))
            condition.lock()
        }
        writerRunning = false
        condition.broadcast()
        condition.unlock()
    }

    /// One non-blocking write from `head`: up to the next line that carries a descriptor, or
    /// that line with its descriptor. The count written; 0 when the socket is full (or the
    /// client was given up on an error).
    private func writeSome() -> Int {
        var descriptor: Int32 = -1
        var end = pending.count
        if let first = descriptors.first {
            if first.offset == head {
                descriptor = first.descriptor
                if descriptors.count > 1 { end = descriptors[1].offset }
            } else {
                end = first.offset
            }
        }
        let sent: Int
        do throws(Errno) {
            sent = try retryingInterrupts { () -> Int in
                pending.withUnsafeBytes { buffer -> Int in
                    let bytes = UnsafeRawBufferPointer(rebasing: buffer[head..<end])
                    return descriptor >= 0
                        ? DescriptorPassing.send(fd, bytes, descriptor: descriptor, flags: Int32(MSG_DONTWAIT))
                        : Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                }
            }
        } catch {
            if error != .resourceTemporarilyUnavailable && error != .wouldBlock { giveUp() }
            return 0
        }
        if descriptor >= 0 && sent > 0 {
            Glibc.close(descriptor)
            descriptors.removeFirst()
        }
        head += sent
        // Sent bytes are dropped now and then, not at every write: a client that keeps up just
        // short of draining must not grow the buffer without bound.
        if head > 65_536 && head * 2 > pending.count {
            pending.removeFirst(head)
            for index in descriptors.indices { descriptors[index].offset -= head }
            head = 0
        }
        giveBackUnused()
        return sent
    }

    /// Empties the buffer once everything in it is written.
    private func reset() {
        pending.removeAll(keepingCapacity: pending.count <= 65_536)
        head = 0
        giveBackUnused()
    }

    /// What waits, rounded up to a whole `chargeStep`.
    private var waitingCharge: Int {
        (pending.count - head + Self.chargeStep - 1) / Self.chargeStep * Self.chargeStep
    }

    /// Counts what waits against the user's memory: false when it has no room for it.
    private func chargeForWaiting() -> Bool {
        guard let memory else { return true }
        let wanted = waitingCharge
        guard wanted > charged else { return true }
        guard memory.take(wanted - charged) == nil else { return false }
        charged = wanted
        return true
    }

    /// Gives the user back what is counted beyond what waits (all of it once nothing does).
    private func giveBackUnused() {
        guard let memory else { return }
        let wanted = waitingCharge
        guard wanted < charged else { return }
        memory.give(charged - wanted)
        charged = wanted
    }

    private func end() {
        ended = true
        for (_, descriptor) in descriptors { Glibc.close(descriptor) }
        descriptors = []
        pending = []
        head = 0
        giveBackUnused()
        condition.broadcast()
    }

    private func giveUp() {
        end()
        shutdown(fd, Int32(SHUT_RDWR))  // the reader sees the end and cleans up
    }
}
