import CoordinationClient
import CoordinationRuntime
import CoordinationServer
import CoordinationWire
import Foundation
import TestSupport
import Testing

/// The client every command and the Swift library speak through: replies matched to their
/// requests, refusals as errors with the server's errno, events to the handler, and an end
/// said once when the server goes.
@Suite struct ControlClientTests {
    /// The built `coordfs`, beside the test bundle.
    static var coordfs: URL {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
            "coordfs")
        return FileManager.default.isExecutableFile(atPath: beside.path)
            ? beside : repository.appendingPathComponent(".build/debug/coordfs")
    }

    func withServer(_ body: (ControlServer, String) throws -> Void) throws {
        let directory = "/tmp/coordfs-client-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: directory + "/doc", contents: Data("x".utf8))
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let domain = CoordinationDomain()
        let server = ControlServer(
            socketPath: directory + "/s.sock", mode: 0o600, domain: domain,
            resolver: HostItemResolver(domain: domain), root: "/")
        try server.start()
        defer { server.stop() }
        try body(server, directory)
    }

    @Test func repliesAndRefusalsReachTheirRequests() throws {
        try withServer { server, directory in
            let client = try ControlClient(socketPath: server.socketPath)
            defer { client.close() }
            #expect(client.server["version"] != nil, "the hello's reply is kept: \(client.server)")
            let watched = try client.request { .watch(id: $0, path: directory + "/doc", mask: .all) }
            #expect(watched["wd"] != nil)
            #expect(throws: ControlError.self) { try client.request { .unwatch(id: $0, wd: 999) } }
            do {
                _ = try client.request { .watch(id: $0, path: "not/absolute", mask: .all) }
                Issue.record("a relative path was taken")
            } catch let error as ControlError {
                #expect(!error.errno.isEmpty && error.description.contains(error.errno))
            }
        }
    }

    @Test func eventsReachTheHandlerAndTheEndIsSaidOnce() throws {
        try withServer { server, directory in
            let watcher = try ControlClient(socketPath: server.socketPath)
            let heard = EventLog(), ended = EventLog()
            watcher.onEvent { [weak watcher] record in
                heard.add(record.mask.names.joined(separator: ","))
                if record.mask.contains(.request) { watcher?.answer(cookie: record.cookie, errno: 0) }
            }
            watcher.onEnd { ended.add("end") }
            _ = try watcher.request { .watch(id: $0, path: directory + "/doc", mask: .all) }
            // Another process holds the item for writing, and so changes it (a process's own
            // holds are not told to its own presenters).
            let writer = Process()
            writer.executableURL = Self.coordfs
            writer.arguments = [
                "coordinate", "--socket", server.socketPath, "-x", directory + "/doc", "--", "/bin/true"
            ]
            try writer.run()
            writer.waitUntilExit()
            #expect(writer.terminationStatus == 0)
            #expect(eventually { heard.events.contains("CHANGED") }, "\(heard.events)")
            server.stop()
            #expect(eventually { ended.events == ["end"] && watcher.isClosed })
            #expect(throws: ControlError.self) { try watcher.request { .status(id: $0) } }
        }
    }
}
