import LinuxSystem
@testable import CoordinationServer
import CoordinationRuntime
import CoordinationWire
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The socket file a server listens on: one live server per path, a file that a dead server left
/// is replaced, and mounts' sockets left by processes that have ended are swept away.
@Suite struct SocketFileTests {
    /// A fresh directory for socket files (a socket path must stay under 108 bytes).
    func scratch() throws -> String {
        let directory = "/tmp/coordfs-sock-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Runs `body` with a socket path in a fresh directory, removed afterwards.
    func withSocketPath(_ body: (String) throws -> Void) throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory + "/d.sock")
    }

    func server(at path: String) -> ControlServer {
        let domain = CoordinationDomain()
        return ControlServer(
            socketPath: path, mode: 0o600, domain: domain, resolver: HostItemResolver(domain: domain), root: "/")
    }

    /// Says hello at `path` and returns whether a server answered it.
    func greets(_ path: String) throws -> Bool { try RawClient(path).greet() }

    /// A socket file with nobody listening on it: what a server killed with SIGKILL leaves.
    func leaveDeadSocket(at path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        #expect(try UnixSocket.withAddress(path) { bind(fd, $0, $1) } == 0)
    }

    func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    @Test func aSecondServerIsRefusedWhileTheFirstListensAndTheFirstServesOn() throws {
        try withSocketPath { path in
            let first = server(at: path), second = server(at: path)
            try first.start()
            #expect(try greets(path))
            do {
                try second.start()
                Issue.record("a second server took the socket of a live one")
                second.stop()
            } catch {
                #expect("\(error)".contains("another coordfs server listens there"), "\(error)")
            }
            #expect(try greets(path), "the first server still has its socket")
            first.stop()
            #expect(!exists(path), "the socket is removed at the end")
        }
    }

    @Test func aSocketFileLeftByADeadServerIsReplaced() throws {
        try withSocketPath { path in
            try leaveDeadSocket(at: path)
            #expect(throws: SocketError.self, "nobody listens on it") { try UnixSocket.connect(to: path) }
            let replacing = server(at: path)
            try replacing.start()
            #expect(try greets(path))
            replacing.stop()
        }
    }

    @Test func aServerEndingLeavesAnotherServersSocketAlone() throws {
        try withSocketPath { path in
            let old = server(at: path), new = server(at: path)
            try old.start()
            unlink(path)  // someone removed it; a new server made its own there
            try new.start()
            old.stop()
            #expect(exists(path))
            #expect(try greets(path), "the new server's socket stays")
            new.stop()
            #expect(!exists(path))
        }
    }

    @Test func socketsOfMountsWhoseProcessEndedAreSweptAndNoOthers() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A process that ended and was reaped, and one that ended and was not (a zombie).
        let reaped = try spawnTrue()
        var status: Int32 = 0
        _ = waitpid(reaped, &status, 0)
        let zombie = try spawnTrue()
        defer { _ = waitpid(zombie, &status, 0) }
        #expect(eventually { ProcFile.hasEnded(zombie) })
        #expect(ProcFile.hasEnded(reaped) && !ProcFile.hasEnded(getpid()))
        #expect(kill(zombie, 0) == 0, "a zombie still answers kill(0): liveness alone cannot tell")

        let listener = server(at: directory + "/mount-\(reaped)-1.sock")
        try listener.start()  // its pid says ended, but somebody listens
        defer { listener.stop() }
        try leaveDeadSocket(at: directory + "/mount-\(reaped)-0.sock")
        try leaveDeadSocket(at: directory + "/mount-\(zombie)-0.sock")
        try leaveDeadSocket(at: directory + "/mount-\(getpid())-7.sock")  // a live process's
        try leaveDeadSocket(at: directory + "/daemon.sock")  // not a mount's
        // not a socket
        #expect(FileManager.default.createFile(atPath: directory + "/mount-\(reaped)-2.sock", contents: Data()))

        ControlServer.removeAbandonedMountSockets(in: directory)
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
        #expect(left == ["mount-\(reaped)-1.sock", "mount-\(getpid())-7.sock", "daemon.sock", "mount-\(reaped)-2.sock"])
        #expect(try greets(directory + "/mount-\(reaped)-1.sock"))
    }

    /// Starts /bin/true without reaping it.
    func spawnTrue() throws -> pid_t {
        var pid: pid_t = 0
        let arguments: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { arguments.forEach { free($0) } }
        let result = posix_spawn(&pid, "/bin/true", nil, nil, arguments, environ)
        guard result == 0 else { throw SocketError(call: "posix_spawn", code: result) }
        return pid
    }
}
