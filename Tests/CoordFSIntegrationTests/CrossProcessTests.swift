import CoordinationClient
import CoordinationWire
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

    /// An Apple-style presenter that prints each message it gets (Sources/PresenterLog).
    static var presenterLog: String {
        Paths.binary.deletingLastPathComponent().appendingPathComponent("PresenterLog").path
    }

    /// Runs two copies on `file`; the counter's final value and each copy's report.
    func runPair(
        _ file: String, environment: [String: String] = CrossProcessTests.environment()
    ) throws
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
                    let result = try run(
                        Self.counter, [file, String(Self.updates), name, peer], environment: environment)
                    let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
                    outcomes.lock.withLock {
                        if let report {
                            outcomes.reports.append(report)
                        } else {
                            outcomes.failures.append("\(name): \(result)")
                        }
                        if result.status != 0 {
                            outcomes.failures.append(
                                "\(name) exited \(result.status): \(result.output) \(result.errors)")
                        }
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
            #expect(
                report["log"] as? String == expected, "\(report["name"] ?? "?") heard \(report["log"] ?? "nothing")")
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

    /// A coordinated write whose hold waited at the daemon while another process moved the item
    /// is granted where the item went (C11), and the accessor writes it there: the item's
    /// presenters there hear it changed (P9). The library looked for the change where the item
    /// had been, found nothing there before or after, and told the daemon that nothing changed,
    /// so a presenter heard relinquish, save and reacquire with no did-change between. In the
    /// pair above, 1 run in 6: a copy whose presenter had heard the first of the other's two
    /// did-moves asked for the item where that move had taken it. Here each step waits for the
    /// daemon to show the one before it, so the writer's hold always waits at the old path.
    @Test func aWriteThatWaitedWhileAnotherProcessMovedItsItemIsToldWhereTheItemWent() throws {
        let (directory, socket) = try Self.daemonDirectory()
        defer { Self.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        // As the daemon spells paths (its status is compared with them).
        let base = URL(fileURLWithPath: directory).resolvingSymlinksInPath().path
        let old = base + "/count.json", new = base + "/moved.json"
        let seed = Data(#"{"count":0,"by":"seed"}"#.utf8)
        #expect(FileManager.default.createFile(atPath: old, contents: seed))
        func started(_ program: String, _ arguments: [String]) throws -> Child {
            try Child(
                "/bin/sh",
                [
                    "-c", #"unset COORDFS_COORDINATION; COORDFS_SOCKET="$1"; export COORDFS_SOCKET; shift; exec "$@""#,
                    "sh", socket, program
                ] + arguments)
        }
        // A Swift presenter of the item in a process of its own; it starts the daemon.
        let presenter = try started(Self.presenterLog, [old])
        try #require(presenter.next(timeout: .seconds(30)) == #"{"ready":true}"#, "PresenterLog did not start")
        let client = try ControlClient(socketPath: socket)
        defer { client.close() }
        /// What waits at the daemon, as "MODE PATH" for each intent of each waiter.
        func waiting() -> [String] {
            guard let fields = try? client.request({ .status(id: $0) }), case .array(let waiters)? = fields["waiters"]
            else { return [] }
            return waiters.flatMap { waiter -> [String] in
                guard case .object(let waiter) = waiter, case .array(let intents)? = waiter["intents"] else {
                    return []
                }
                return intents.compactMap { intent -> String? in
                    guard case .object(let intent) = intent, case .string(let mode)? = intent["mode"],
                        case .string(let path)? = intent["path"]
                    else { return nil }
                    return "\(mode) \(path)"
                }
            }
        }
        /// Whether `entry` waits at the daemon within `timeout` (asked every 20 ms).
        func waits(_ entry: String, within timeout: Duration = .seconds(30)) -> Bool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if waiting().contains(entry) { return true }
                usleep(20_000)
            }
            return waiting().contains(entry)
        }

        // The mover holds the item and where it goes, as the counter's final move does.
        let moving = try client.request {
            .hold(
                id: $0,
                intents: [
                    WireIntent(path: old, access: .write, options: ["forMoving"]),
                    WireIntent(path: new, access: .write, options: ["forReplacing"])
                ],
                wait: true, timeout: 30, inherit: false)
        }
        guard case .int(let mover)? = moving["hold"] else { Issue.record("no hold: \(moving)"); return }
        // The writer: the counter, one update of the item at the old path, which waits.
        let writer = try started(Self.counter, [old, "1", "b", "-"])
        #expect(waits("write(forMerging) \(old)"), "the writer's hold does not wait: \(waiting())")
        // A hold of the old path that waits too, for the writer's final move (away and back) to
        // wait for in its turn: it replaces, so it stays at the path when the item moves (O8).
        let second = EventLog()
        client.request({
            .hold(
                id: $0, intents: [WireIntent(path: old, access: .write, options: ["forReplacing"])],
                wait: true, timeout: 30, inherit: false)
        }) { result in
            if case .success(let fields) = result, case .int(let number)? = fields["hold"] {
                second.add(String(number))
            } else {
                second.add("\(result)")
            }
        }
        #expect(waits("write(forReplacing) \(old)", within: .seconds(10)), "\(waiting())")

        // The move; outside a mount nobody sees the rename, so the mover reports it.
        #expect(rename(old, new) == 0)
        _ = try client.request { .moved(id: $0, hold: mover, from: old, to: new) }
        let followed = waiting()
        #expect(
            followed.contains("write(forMerging) \(new)") && followed.contains("write(forReplacing) \(old)"),
            "the writer's wait follows the item, the replacing one stays: \(followed)")
        _ = try client.request { .release(id: $0, hold: mover, changed: false) }

        // The writer's hold is granted where the item is now, and it updates it there; then its
        // final move of the old path waits for the second hold.
        #expect(eventually(.seconds(10)) { Int(second.events.first ?? "") != nil }, "\(second.events)")
        let held = try #require(Int(second.events.first ?? ""))
        #expect(waits("write(forMoving) \(old)"), "the writer's final move does not wait: \(waiting())")
        #expect(FileManager.default.createFile(atPath: old, contents: seed))
        _ = try client.request { .release(id: $0, hold: held, changed: false) }
        #expect(writer.waitForExit(timeout: .seconds(30)) == 0)
        let report = (writer.next(timeout: .seconds(5))).flatMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(
            report?["log"] as? String == "M" && (report?["errors"] as? [String])?.isEmpty == true,
            "the writer's presenter heard the move alone, and nothing failed: \(String(describing: report))")
        let count =
            (try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: new))) as? [String: Any])?[
                "count"] as? Int
        #expect(count == 1, "the update is in the item where it went")

        // The presenter heard the move, then the writer's update in full.
        var heard: [String] = []
        while let line = presenter.next(timeout: .seconds(1)) {
            let message =
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["message"] as? String
            heard.append(message ?? line)
        }
        #expect(
            heard == [
                "relinquishToWriter", "didMove", "reacquire", "relinquishToWriter", "save", "didChange", "reacquire"
            ],
            "\(heard)")
    }

    /// Outside any mount, `coordfs watch` starts the user's daemon where none runs, and a hold
    /// of `coordfs coordinate` and the accesses of a Swift program meet its presenter there.
    @Test func commandsAndASwiftProgramMeetAtTheDaemon() throws {
        let (directory, socket) = try Self.daemonDirectory()
        defer { Self.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/count.json"
        #expect(FileManager.default.createFile(atPath: file, contents: Data(#"{"count":0,"by":"seed"}"#.utf8)))
        let watch = try Child(
            "/bin/sh",
            [
                "-c", "unset COORDFS_COORDINATION; COORDFS_SOCKET=\"$1\" exec \"$2\" watch \"$3\" 2>&1",
                "sh", socket, Paths.binary.path, file
            ])
        #expect(watch.next() == "Watches established.")
        #expect(FileManager.default.fileExists(atPath: socket), "the watch started no daemon")
        let held = try run(
            Paths.binary.path, ["coordinate", "--write", file, "--", "true"],
            environment: Self.environment(socket: socket))
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
        #expect(
            heard.contains { $0.contains("SAVE") } && heard.contains { $0.contains("CHANGED") }
                && heard.contains { $0.contains("MOVED_TO") },
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
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false,
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
        let shell = try Child(
            "/bin/sh", [Paths.scripts.appendingPathComponent("beside_loop.sh").path, fx.mountPoint.path])
        let updates = CrossProcessTests.updates
        let result = try run(
            CrossProcessTests.counter, [fx.path("count.json"), String(updates), "a", "-"],
            environment: CrossProcessTests.environment())
        #expect(result.status == 0, "\(result)")
        let rounds = Int(shell.next()?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        #expect(rounds > 0, "the loop never ran")
        let count =
            (try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: fx.path("count.json"))))
            as? [String: Any])?["count"] as? Int
        #expect(count == updates)
        // No program got an error (EBUSY, EDEADLK, ENOENT), and no read saw a half-written file.
        let errors = (try? String(contentsOfFile: fx.path("errors"), encoding: .utf8)) ?? ""
        #expect(errors.isEmpty, "\(errors)")
        for name in try FileManager.default.contentsOfDirectory(atPath: fx.mountPoint.path)
        where name.hasPrefix("read.") || name.hasPrefix("copy.") {
            let data = try Data(contentsOf: URL(fileURLWithPath: fx.path(name)))
            #expect(
                (try? JSONSerialization.jsonObject(with: data)) != nil,
                "\(name) holds '\(String(decoding: data, as: UTF8.self))'")
        }
        // The program's presenter was asked by the loop's reads, and reacquired after each.
        let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] ?? [:]
        #expect(report["relinquish"] as? Int == report["reacquire"] as? Int, "\(report)")
        #expect((report["relinquish"] as? Int ?? 0) > 0, "\(report)")
    }
}
