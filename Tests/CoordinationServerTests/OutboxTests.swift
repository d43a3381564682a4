import LinuxSystem
@testable import CoordinationServer
import CoordinationWire
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The outbox against a real socket pair whose far end reads only when the test says so.
@Suite struct OutboxTests {
    /// A connected pair with small buffers, so that a few kilobytes fill the near end. Reads at
    /// the far end give up after 10 s, so that a broken outbox fails a test instead of hanging it.
    private static func socketPair() -> (near: Int32, far: Int32) {
        var ends: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        var size: Int32 = 4096
        setsockopt(ends[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(ends[1], SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var patience = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(ends[1], SOL_SOCKET, SO_RCVTIMEO, &patience, socklen_t(MemoryLayout<timeval>.size))
        return (ends[0], ends[1])
    }

    private static func line(_ number: Int) -> [UInt8] {
        Array("line \(number) \(String(repeating: "x", count: number % 97))\n".utf8)
    }

    /// Reads until `count` bytes came (or the end), noting where each descriptor arrived: the
    /// byte range of the read that brought it.
    private static func readAll(_ fd: Int32, count: Int) -> (bytes: [UInt8], descriptors: [(Range<Int>, Int32)]) {
        var bytes: [UInt8] = []
        var descriptors: [(Range<Int>, Int32)] = []
        var buffer = [UInt8](repeating: 0, count: 1500)
        while bytes.count < count {
            guard let (read, received) = try? DescriptorPassing.receive(fd, into: &buffer) else { break }
            if read <= 0 { break }
            for descriptor in received { descriptors.append((bytes.count..<bytes.count + read, descriptor)) }
            bytes += buffer[0..<read]
        }
        return (bytes, descriptors)
    }

    @Test func aFullSocketNeverBlocksTheSenderAndEverythingArrivesInOrder() throws {
        let (near, far) = Self.socketPair()
        defer { close(near); close(far) }
        let outbox = Outbox(fd: near)
        // Far more than the socket holds, with nobody reading: every send returns (on a thread
        // of its own, so that a send that blocks fails the test instead of hanging it).
        let sender = Background { () -> [UInt8] in
            var expected: [UInt8] = []
            for number in 0..<5_000 {
                let line = Self.line(number)
                expected += line
                guard outbox.send(line) else { return [] }
            }
            return expected
        }
        let expected = try sender.join()
        #expect(!expected.isEmpty, "every send was accepted")
        #expect(outbox.queuedBytes > 0, "the socket could not have taken it all")
        let (bytes, _) = Self.readAll(far, count: expected.count)
        #expect(bytes == expected)
        #expect(eventually { outbox.queuedBytes == 0 })
        outbox.close(grace: .zero)
    }

    @Test func aQueuedDescriptorRidesOnItsOwnLinesFirstByte() throws {
        let (near, far) = Self.socketPair()
        defer { close(near); close(far) }
        let outbox = Outbox(fd: near)
        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0)
        var expected: [UInt8] = []
        for number in 0..<400 { expected += Self.line(number); outbox.send(Self.line(number)) }
        #expect(outbox.queuedBytes > 0, "the descriptor's line is queued, not sent at once")
        let carrier = Array("the line with a descriptor\n".utf8)
        let carrierStart = expected.count
        #expect(outbox.send(carrier, descriptor: pipeEnds[0]))
        close(pipeEnds[0])  // the outbox keeps its own duplicate
        expected += carrier
        for number in 400..<800 { expected += Self.line(number); outbox.send(Self.line(number)) }

        let (bytes, descriptors) = Self.readAll(far, count: expected.count)
        #expect(bytes == expected)
        try #require(descriptors.count == 1)
        let (range, received) = descriptors[0]
        #expect(range.contains(carrierStart), "arrived with \(range), the line starts at \(carrierStart)")
        // It is the pipe: what goes in at the write end comes out of it.
        #expect(write(pipeEnds[1], "ok", 2) == 2)
        var two = [UInt8](repeating: 0, count: 2)
        #expect(read(received, &two, 2) == 2 && two == Array("ok".utf8))
        close(received)
        close(pipeEnds[1])
        outbox.close(grace: .zero)
    }

    @Test func aClientThatReadsNothingIsGivenUpAfterTheStallLimit() throws {
        let (near, far) = Self.socketPair()
        defer { close(near); close(far) }
        let outbox = Outbox(fd: near, stallLimit: .milliseconds(200))
        for number in 0..<1_000 { outbox.send(Self.line(number)) }
        #expect(eventually { !outbox.send(Self.line(0)) }, "given up once nothing was read for the limit")
        // The far end sees the end after what was in the socket: the reader can clean up.
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var last = 1
        while last > 0 { last = read(far, &buffer, buffer.count) }
        #expect(last == 0, "the end, not a read that timed out")
        outbox.close(grace: .zero)
    }

    @Test func aClientThatLetsTooMuchPileUpIsGivenUpAtOnce() throws {
        let (near, far) = Self.socketPair()
        defer { close(near); close(far) }
        let outbox = Outbox(fd: near, capacity: 16_384)
        var accepted = 0
        while outbox.send(Self.line(accepted)) && accepted < 10_000 { accepted += 1 }
        #expect(accepted < 10_000, "refused once more than the capacity waited")
        #expect(outbox.queuedBytes == 0, "and the queue is dropped")
        outbox.close(grace: .zero)
    }

    /// What waits for a client counts against its user's memory, over all the user's
    /// connections: the connection that would take the user past it is given up, another user's
    /// queues as before, and what is read or dropped is given back.
    @Test func unreadLinesCountAgainstTheirUsersMemoryAlone() throws {
        let step = Outbox.chargeStep
        let counts = UserCounts(
            limits: ClientLimits(
                connections: 10, connectionsPerUser: 10, watchesPerUser: 10, holdsPerConnection: 10,
                servicesPerConnection: 10, memoryPerUser: 4 * step))
        let (near, far) = Self.socketPair(), (secondNear, secondFar) = Self.socketPair(),
            (theirNear, theirFar) = Self.socketPair()
        defer { for fd in [near, far, secondNear, secondFar, theirNear, theirFar] { close(fd) } }
        func outbox(_ fd: Int32, of uid: UInt32) -> Outbox {
            Outbox(fd: fd, stallLimit: .seconds(60), memory: UserMemory(counts: counts, uid: uid))
        }
        let first = outbox(near, of: 1000), second = outbox(secondNear, of: 1000), theirs = outbox(theirNear, of: 1001)
        // Sends lines to `box` until almost three steps wait: what was sent, or nil at a refusal.
        func fill(_ box: Outbox) -> [UInt8]? {
            var sent: [UInt8] = [], number = 0
            while box.queuedBytes < 3 * step - 200 && number < 100_000 {
                let line = Self.line(number)
                guard box.send(line) else { return nil }
                sent += line
                number += 1
            }
            return sent
        }
        let expected = try #require(fill(first), "three steps of one user's four")
        #expect(counts.memory(of: 1000) == 3 * step)
        // The user's second connection has one step left: past it, it is given up and its queue dropped.
        var accepted = 0
        while accepted < 100_000 && second.send(Self.line(accepted)) { accepted += 1 }
        #expect(accepted < 100_000, "refused past the user's memory")
        #expect(second.queuedBytes == 0)
        #expect(counts.memory(of: 1000) == 3 * step, "what the second had waiting is given back")
        // Another user's connection is not the first user's business.
        #expect(fill(theirs) != nil, "another user's lines queue as before")
        #expect(counts.memory(of: 1001) == 3 * step)
        // Read, the first connection's lines are given back; closed, the other user's are.
        #expect(Self.readAll(far, count: expected.count).bytes == expected)
        #expect(eventually { counts.memory(of: 1000) == 0 })
        theirs.close(grace: .zero)
        #expect(counts.memory(of: 1001) == 0)
        first.close(grace: .zero)
        second.close(grace: .zero)
    }

    @Test func closingWaitsForTheQueueWithinItsGraceThenStops() throws {
        let (near, far) = Self.socketPair()
        defer { close(near); close(far) }
        let outbox = Outbox(fd: near)
        var expected: [UInt8] = []
        for number in 0..<2_000 { expected += Self.line(number); outbox.send(Self.line(number)) }
        let reader = Background { Self.readAll(far, count: expected.count).bytes }
        outbox.close(grace: .seconds(10))
        #expect(try reader.join() == expected, "everything queued went out before close returned")
        #expect(!outbox.send(Self.line(1)), "nothing is sent after close")
    }
}
