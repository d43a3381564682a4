import CoordinationClient
import Foundation
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
        var reports: [[String: Any]] = []
        let group = DispatchGroup()
        let lock = NSLock()
        var failures: [String] = []
        for (name, peer) in [("a", "b"), ("b", "a")] {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    let result = try run(Self.counter, [file, String(Self.updates), name, peer], environment: environment)
                    let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
                    lock.withLock {
                        if let report { reports.append(report) } else { failures.append("\(name): \(result)") }
                        if result.status != 0 { failures.append("\(name) exited \(result.status): \(result.output) \(result.errors)") }
                    }
                } catch {
                    lock.withLock { failures.append("\(name): \(error)") }
                }
            }.start()
        }
        #expect(group.wait(timeout: .now() + 240) == .success, "the two copies did not end within 240 s")
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
        let directory = "/tmp/coordfs-cross-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A daemon of this test's own, which the first program starts: none runs there before.
        let socket = directory + "/daemon.sock"
        let environment = Self.environment(socket: socket)
        defer { Self.stopDaemon(at: socket) }
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

    /// This process's environment, with coordination across processes on (`make test` keeps
    /// its own process to itself) and the daemon's socket at `socket`.
    static func environment(socket: String? = nil) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_COORDINATION"] = nil
        environment["COORDFS_SOCKET"] = socket
        return environment
    }

    /// Ends the daemon serving `socket` (its pid is in the hello's reply).
    static func stopDaemon(at socket: String) {
        guard let client = try? ControlClient(socketPath: socket), case .int(let pid)? = client.server["pid"] else { return }
        client.close()
        kill(pid_t(pid), SIGTERM)
    }
}
