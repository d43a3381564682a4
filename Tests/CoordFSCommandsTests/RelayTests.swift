@testable import CoordFSCommands
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs services --connect`'s relay, as `nc -U` relays: a socket pair for the connection,
/// pipes for standard input and output.
@Suite struct RelayTests {
    /// A connection, and pipes standing for standard input and output.
    struct Ends {
        let ours: Int32, provider: Int32
        let input: (read: Int32, write: Int32), output: (read: Int32, write: Int32)

        init() throws {
            var pair: [Int32] = [0, 0], input: [Int32] = [0, 0], output: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0, pipe(&input) == 0, pipe(&output) == 0
            else {
                throw CommandFailure("socketpair or pipe: \(errno)")
            }
            (ours, provider) = (pair[0], pair[1])
            self.input = (input[0], input[1])
            self.output = (output[0], output[1])
        }

        /// Runs the relay to its end, then returns what it printed.
        func relay() throws -> String {
            try Relay.run(connection: ours, input: input.read, output: output.write)
            close(output.write)
            var printed: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 4096)
            while case let count = read(output.read, &buffer, buffer.count), count > 0 { printed += buffer[..<count] }
            for fd in [ours, input.read, output.read] { close(fd) }
            return String(decoding: printed, as: UTF8.self)
        }
    }

    static func send(_ text: String, to fd: Int32) {
        _ = text.withCString { write(fd, $0, strlen($0)) }
    }

    /// The provider answers and closes before it reads our line: the connection is reset
    /// (ECONNRESET). The answer is printed, and the relay ends without an error, as nc's does.
    /// (Foundation's availableData trapped on the reset: SIGILL.)
    @Test func aProviderThatAnswersAndClosesUnreadEndsTheRelay() throws {
        let ends = try Ends()
        Self.send("hi\n", to: ends.input.write)
        close(ends.input.write)
        let provider = ends.provider
        Thread {
            Self.send("bye\n", to: provider)
            // Closed once our line has come, unread: that resets the connection.
            var ready = pollfd(fd: provider, events: Int16(POLLIN), revents: 0)
            _ = poll(&ready, 1, 5_000)
            close(provider)
        }.start()
        #expect(try ends.relay() == "bye\n")
    }

    /// At the end of the input the connection is half-closed: the provider reads its end of
    /// file, then answers, and its close ends the relay.
    @Test func theEndOfTheInputHalfClosesTheConnection() throws {
        let ends = try Ends()
        Self.send("three\nlines\nhere\n", to: ends.input.write)
        close(ends.input.write)
        let provider = ends.provider
        Thread {
            var heard = 0, buffer = [UInt8](repeating: 0, count: 4096)
            while case let count = read(provider, &buffer, buffer.count), count > 0 { heard += count }
            Self.send("heard \(heard) bytes\n", to: provider)
            close(provider)
        }.start()
        #expect(try ends.relay() == "heard 17 bytes\n")
    }

    /// A provider that reads no more (here it shut its reading side) fails our send with
    /// EPIPE: no SIGPIPE (which would end this test run), and what it still sends is printed
    /// until it closes.
    @Test func aProviderThatReadsNoMoreRaisesNoSignal() throws {
        let ends = try Ends()
        shutdown(ends.provider, Int32(SHUT_RD))
        Self.send("y\n", to: ends.input.write)
        close(ends.input.write)
        let provider = ends.provider
        Thread {
            usleep(200_000)
            Self.send("bye\n", to: provider)
            close(provider)
        }.start()
        #expect(try ends.relay() == "bye\n")
    }

    /// A failure is said: an output that cannot be written.
    @Test func anOutputThatCannotBeWrittenIsAFailure() throws {
        let ends = try Ends()
        close(ends.input.write)
        let full = open("/dev/full", O_WRONLY)
        Self.send("bye\n", to: ends.provider)
        close(ends.provider)
        #expect {
            try Relay.run(connection: ends.ours, input: ends.input.read, output: full)
        } throws: { error in
            "\(error)".contains("cannot write standard output") && "\(error)".contains("No space left on device")
        }
        for fd in [full, ends.ours, ends.input.read, ends.output.read, ends.output.write] { close(fd) }
    }
}
