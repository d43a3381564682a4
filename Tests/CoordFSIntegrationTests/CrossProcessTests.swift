import CoordinationClient
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Two copies of an Apple-style program (`CoordinatedCounter`: a JSON counter updated under
/// coordinated merging writes with atomic saves, a presenter, a final move) run at once. The
/// counter ends at exactly twice the updates, and each presenter hears each of the other's
/// accesses exactly once, in Apple's order: relinquish, save, did-change, reacquire for an
/// update; relinquish, did-move twice (away and back), reacquire for the move.
@Suite(.serialized) struct CrossProcessTests {
    static let updates = 25

    static var counter: String {
        Paths.binary.deletingLastPathComponent().appendingPathComponent("CoordinatedCounter").path
    }

    /// Runs two copies on `file`; the counter's final value and each copy's report.
    func runPair(_ file: String, environment: [String: String] = CrossProcessTests.environment()) throws
        -> (count: Int?, reports: [[String: Any]])
    {
        // What the copies' threads find, under its lock.
        // @unchecked Sendable: its results are behind its lock.
        final class Outcomes: @unchecked Sendable {
            let lock = NSLock()
            var reports: [[String: Any]] = []
            var failures: [String] = []
        }
        let outcomes = Outcomes()
        let group = DispatchGroup()
        for (name, peer) in [("a", "b"), ("b", "a")] {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    let result = try run(Self.counter, [file, String(Self.updates), name, peer], environment: environment)
                    let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
                    outcomes.lock.withLock {
                        if let report { outcomes.reports.append(report) } else { outcomes.failures.append("\(name): \(result)") }
                        if result.status != 0 { outcomes.failures.append("\(name) exited \(result.status): \(result.output) \(result.errors)") }
                    }
                } catch {
                    outcomes.lock.withLock { outcomes.failures.append("\(name): \(error)") }
                }
            }.start()
        }
        #expect(group.wait(timeout: .now() + 240) == .success, "the two copies did not end within 240 s")
        let (reports, failures) = outcomes.lock.withLock { (outcomes.reports, outcomes.failures) }
        for failure in failures { Issue.record(Comment(rawValue: failure)) }
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        let count = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["count"] as? Int
        return (count, reports)
    }

    /// What each presenter must have heard of the other's accesses, message by message.
    func expectExactMessages(_ reports: [[String: Any]]) {
        #expect(reports.count == 2)
        let expected = String(repeating: "RSCA", count: Self.updates) + "RMMA"
        for report in reports {
            #expect(report["log"] as? String == expected, "\(report["name"] ?? "?") heard \(report["log"] ?? "nothing")")
            #expect((report["errors"] as? [String])?.isEmpty == true, "\(report["errors"] ?? "")")
        }
    }

    @Test func twoProgramsOutsideAnyMountCoordinateThroughTheDaemonTheyStart() throws {
        let (directory, socket) = try Self.daemonDirectory()
        // A daemon of this test's own, which the first program starts: none runs there before.
        let environment = Self.environment(socket: socket)
        defer { Self.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        #expect(!FileManager.default.fileExists(atPath: socket))
        let (count, reports) = try runPair(directory + "/count.json", environment: environment)
        #expect(count == 2 * Self.updates)
        expectExactMessages(reports)
        #expect(FileManager.default.fileExists(atPath: socket), "no daemon was started")
    }

    @Test func twoProgramsInsideAMountCoordinateThroughIt() throws {
        let fx = try MountFixture()
        let (count, reports) = try runPair(fx.path("count.json"))
        #expect(count == 2 * Self.updates)
        expectExactMessages(reports)
    }

    /// Outside any mount, `coordfs watch` starts the user's daemon where none runs, and a hold
    /// of `coordfs coordinate` and the accesses of a Swift program meet its presenter there.
    @Test func commandsAndASwiftProgramMeetAtTheDaemon() throws {
        let (directory, socket) = try Self.daemonDirectory()
        defer { Self.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/count.json"
        #expect(FileManager.default.createFile(atPath: file, contents: Data(#"{"count":0,"by":"seed"}"#.utf8)))
        let watch = try Child("/bin/sh", ["-c", "unset COORDFS_COORDINATION; COORDFS_SOCKET=\"$1\" exec \"$2\" watch \"$3\" 2>&1",
                                          "sh", socket, Paths.binary.path, file])
        #expect(watch.next() == "Watches established.")
        #expect(FileManager.default.fileExists(atPath: socket), "the watch started no daemon")
        let held = try run(Paths.binary.path, ["coordinate", "--write", file, "--", "true"], environment: Self.environment(socket: socket))
        #expect(held.status == 0, "\(held)")
        #expect(watch.next()?.contains("RELINQUISH_WRITER,REQUEST cookie=1 pid=") == true)
        #expect(watch.next()?.contains("CHANGED") == true)
        #expect(watch.next()?.contains("REACQUIRE") == true)
        let program = try run(Self.counter, [file, "1", "a", "-"], environment: Self.environment(socket: socket))
        #expect(program.status == 0, "\(program)")
        var heard: [String] = []
        while let line = watch.next(timeout: .milliseconds(500)) { heard.append(line) }
        let program1 = heard.filter { $0.contains("RELINQUISH_WRITER") }.count
        #expect(program1 == 2, "the program's update and its move: \(heard)")
        #expect(heard.contains { $0.contains("SAVE") } && heard.contains { $0.contains("CHANGED") } && heard.contains { $0.contains("MOVED_TO") },
                "\(heard)")
    }

    /// This process's environment, with coordination across processes on (`make test` keeps
    /// its own process to itself) and the daemon's socket at `socket`.
    static func environment(socket: String? = nil) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_COORDINATION"] = nil
        environment["COORDFS_SOCKET"] = socket
        return environment
    }

    /// A fresh directory only this user may use, and the daemon socket path in it (no daemon
    /// serves it yet).
    static func daemonDirectory() throws -> (directory: String, socket: String) {
        let directory = "/tmp/coordfs-cross-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        return (directory, directory + "/daemon.sock")
    }

    /// Ends the daemon serving `socket` (its pid is in the hello's reply), and waits for it to
    /// be gone: removing its directory while it removes its socket made the removal fail
    /// (ENOENT mid-way) and left the directory behind.
    /// A test's clean-up, not a check: no daemon there (it never started, or ended already)
    /// leaves nothing to stop; one that does not end is recorded.
    static func stopDaemon(at socket: String) {
        let client = try? ControlClient(socketPath: socket)
        let served = client?.server["pid"]
        client?.close()
        if case .int(let pid)? = served, kill(pid_t(pid), SIGTERM) == 0 {
            #expect(eventually(.seconds(10)) { kill(pid_t(pid), 0) != 0 }, "the daemon at \(socket) did not end")
        }
    }
}

/// One copy of the program beside unmodified programs using the same directory: `cat` and
/// `cp` of the counter, `mv` and `rm` of copies beside it, in a loop while it runs.
@Suite struct CrossProcessWithShellTests {
    @Test func oneProgramBesideAShellLoopOfMvCatRmAndCp() throws {
        let fx = try MountFixture()
        try fx.seed("count.json", #"{"count":0,"by":"seed"}"#)
        let shell = try Child("/bin/sh", [Paths.scripts.appendingPathComponent("beside_loop.sh").path, fx.mountPoint.path])
        let updates = CrossProcessTests.updates
        let result = try run(CrossProcessTests.counter, [fx.path("count.json"), String(updates), "a", "-"],
                             environment: CrossProcessTests.environment())
        #expect(result.status == 0, "\(result)")
        let rounds = Int(shell.next()?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        #expect(rounds > 0, "the loop never ran")
        let count = (try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: fx.path("count.json")))) as? [String: Any])?["count"] as? Int
        #expect(count == updates)
        // No program got an error (EBUSY, EDEADLK, ENOENT), and no read saw a half-written file.
        let errors = (try? String(contentsOfFile: fx.path("errors"), encoding: .utf8)) ?? ""
        #expect(errors.isEmpty, "\(errors)")
        for name in try FileManager.default.contentsOfDirectory(atPath: fx.mountPoint.path)
        where name.hasPrefix("read.") || name.hasPrefix("copy.") {
            let data = try Data(contentsOf: URL(fileURLWithPath: fx.path(name)))
            #expect((try? JSONSerialization.jsonObject(with: data)) != nil, "\(name) holds '\(String(decoding: data, as: UTF8.self))'")
        }
        // The program's presenter was asked by the loop's reads, and reacquired after each.
        let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] ?? [:]
        #expect(report["relinquish"] as? Int == report["reacquire"] as? Int, "\(report)")
        #expect((report["relinquish"] as? Int ?? 0) > 0, "\(report)")
    }
}
