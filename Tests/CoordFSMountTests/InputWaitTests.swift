@testable import CoordFSMount
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What a program asleep outside the mount waits for, read from /proc (`InputWait`): the other
/// end of the TCP connection or the pipe it reads, and which processes hold that end.
@Suite struct InputWaitTests {
    /// A python3 server of one TCP connection to a reader it started, which sleeps reading it;
    /// with a bystander, a third process holds the server's end of the connection too. The
    /// server sleeps reading its standard input until this ends, and the others end with it.
    final class Conversation {
        static let script = """
            import socket, subprocess, sys
            listening = socket.socket()
            listening.bind(("127.0.0.1", 0))
            listening.listen(1)
            reader = subprocess.Popen(
                [sys.executable, "-c",
                 "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1]))).recv(1)",
                 str(listening.getsockname()[1])], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            connection, _ = listening.accept()
            listening.close()
            third = None
            if sys.argv[1:] == ["--bystander"]:
                third = subprocess.Popen(
                    ["sleep", "60"], pass_fds=(connection.fileno(),), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL)
            print(reader.pid, third.pid if third else 0, connection.fileno(), flush=True)
            sys.stdin.readline()
            if third:
                third.kill()
            """
        private let server: Process
        private let input: Pipe, output: Pipe
        /// The reader's process and the bystander's (0: none).
        let reader: Int32, bystander: Int32
        /// The inode of the server's end of the connection, the reader's peer.
        let serverEnd: UInt64

        init(bystander withBystander: Bool = false) throws {
            let server = Process(), input = Pipe(), output = Pipe()
            server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            server.arguments = ["-c", Conversation.script] + (withBystander ? ["--bystander"] : [])
            server.standardInput = input
            server.standardOutput = output
            try server.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                line.append(chunk)
            }
            let words = String(decoding: line, as: UTF8.self).split(whereSeparator: \.isWhitespace)
            try #require(words.count == 3, "the server said \(words)")
            let link = try FileManager.default.destinationOfSymbolicLink(
                atPath: "/proc/\(server.processIdentifier)/fd/\(words[2])")
            self.server = server
            self.input = input
            self.output = output
            reader = try #require(Int32(words[0]))
            bystander = try #require(Int32(words[1]))
            serverEnd = try #require(InputWaitTests.inode(of: link, kind: "socket"), "\(link)")
        }

        var process: Int32 { server.processIdentifier }

        deinit {
            try? input.fileHandleForWriting.close()
            server.waitUntilExit()
        }
    }

    /// The inode of "KIND:[INODE]", as /proc/PID/fd names a pipe or a socket.
    static func inode(of link: String, kind: String) -> UInt64? {
        guard link.hasPrefix(kind + ":["), link.hasSuffix("]") else { return nil }
        return UInt64(link.dropFirst(kind.count + 2).dropLast())
    }

    @Test(.enabled(if: geteuid() == 0, "looks at every process's descriptors"))
    func aReaderOfAConnectionWaitsForItsServerAlone() throws {
        let talk = try Conversation()
        let end = InputWait.Source.socket(talk.serverEnd)
        #expect(eventually(.seconds(5)) { InputWait.sources(of: talk.reader) == [end] }, "asleep reading its peer")
        #expect(InputWait.isHeld(end, by: talk.process) && !InputWait.isHeld(end, by: getpid()))
        #expect(InputWait.holders(of: end) == [talk.process], "the server alone holds its end")
        #expect(InputWait.hasOneThread(talk.process))
    }

    @Test(.enabled(if: geteuid() == 0, "looks at every process's descriptors"))
    func anotherHolderOfTheServersEndIsFound() throws {
        let talk = try Conversation(bystander: true)
        let end = InputWait.Source.socket(talk.serverEnd)
        #expect(eventually(.seconds(5)) { InputWait.sources(of: talk.reader) == [end] })
        #expect(InputWait.holders(of: end) == [talk.process, talk.bystander])
    }

    /// A reader of a pipe waits for its write ends (this process's here); the read end counts
    /// for nothing. A process asleep anywhere else waits for no input.
    @Test(.enabled(if: geteuid() == 0, "looks at every process's descriptors"))
    func aReaderOfAPipeWaitsForItsWriters() throws {
        let pipe = Pipe()
        let cat = Process(), sleeper = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/cat")
        cat.standardInput = pipe
        cat.standardOutput = FileHandle.nullDevice
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30"]
        try cat.run()
        try sleeper.run()
        defer {
            try? pipe.fileHandleForWriting.close()
            sleeper.terminate()
            cat.waitUntilExit()
            sleeper.waitUntilExit()
        }
        var info = stat()
        #expect(fstat(pipe.fileHandleForWriting.fileDescriptor, &info) == 0)
        let written = InputWait.Source.pipe(UInt64(info.st_ino))
        #expect(eventually(.seconds(5)) { InputWait.sources(of: cat.processIdentifier) == [written] })
        let writers = InputWait.holders(of: written)
        #expect(
            writers?.contains(getpid()) == true && writers?.contains(cat.processIdentifier) == false,
            "this process writes it, cat reads it: \(writers ?? [])")
        Thread.sleep(forTimeInterval: 0.2)
        #expect(InputWait.sources(of: sleeper.processIdentifier) == nil, "asleep in nanosleep, reading nothing")
    }

    /// A process waiting for a record lock waits for the process holding it, however deep the
    /// kernel queued it; flock and open-file-description locks name no one process.
    @Test func recordLockWaitersWaitForTheHolderAtTheHeadOfTheirGroup() {
        let text = """
            1: FLOCK  ADVISORY  WRITE 8656 fe:00:16228234 0 EOF
            1: -> FLOCK  ADVISORY  WRITE 9000 fe:00:16228234 0 EOF
            2: POSIX  ADVISORY  WRITE 23656 fe:00:16277502 0 EOF
            2: -> POSIX  ADVISORY  WRITE 23816 fe:00:16277502 0 EOF
            2:  -> POSIX  ADVISORY  WRITE 23817 fe:00:16277502 0 EOF
            3: OFDLCK ADVISORY  WRITE -1 fe:00:16351266 0 EOF
            3: -> OFDLCK ADVISORY  WRITE -1 fe:00:16351266 0 EOF
            4: POSIX  ADVISORY  WRITE 8656 fe:00:16351266 1073741824 1073742335
            """
        #expect(RecordLocks.owners(awaitedIn: text) == [23816: [23656], 23817: [23656]])
    }

    /// A python3 process asleep in fcntl(F_SETLKW) for a lock this process holds waits for
    /// this process, and for no input.
    @Test(.enabled(if: geteuid() == 0, "looks at another process's system call"))
    func aWaiterForARecordLockWaitsForItsHolder() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("coordfs-lock-\(UUID())").path
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(path)
        }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        try #require(fcntl(fd, F_SETLK, &lock) == 0)
        let waiter = Process()
        waiter.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        waiter.arguments = [
            "-c", "import fcntl, os, sys; fcntl.lockf(os.open(sys.argv[1], os.O_RDWR), fcntl.LOCK_EX)", path
        ]
        try waiter.run()
        defer {
            // SIGKILL: a test runner's children may inherit its blocked signals, SIGTERM's too.
            kill(waiter.processIdentifier, SIGKILL)
            waiter.waitUntilExit()
        }
        let me = getpid()
        #expect(eventually(.seconds(5)) { InputWait.sources(of: waiter.processIdentifier) == [.lock(owner: me)] })
        #expect(InputWait.isHeld(.lock(owner: me), by: me) && InputWait.holders(of: .lock(owner: me)) == [me])
    }
}
