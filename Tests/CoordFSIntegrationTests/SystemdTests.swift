import CoordinationClient
import CoordinationWire
import Foundation
import TestSupport
import Testing

/// The daemon as a systemd user service: the units shipped in Mounts/systemd pass systemd's own
/// check, and the daemon serves the socket systemd hands it (socket activation), then leaves it
/// to systemd when it ends, for the next client to start it again.
@Suite struct SystemdTests {
    static let analyze = "/usr/bin/systemd-analyze"
    static let activate = "/usr/bin/systemd-socket-activate"

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze is not installed"))
    func theShippedUnitsPassSystemdsCheck() throws {
        let shipped = Paths.repository.appendingPathComponent("Mounts/systemd")
        let units = try FileManager.default.contentsOfDirectory(atPath: shipped.path).sorted()
        #expect(
            units == [
                "coordfs-daemon.service", "coordfs-daemon.socket", "srv-documents.automount", "srv-documents.mount"
            ])
        let directory = try CrossProcessTests.daemonDirectory().directory
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for unit in units {
            // As `make install` writes them: the command where it was installed.
            let text = try String(contentsOf: shipped.appendingPathComponent(unit), encoding: .utf8)
                .replacingOccurrences(of: "/usr/local/bin/coordfs", with: Paths.binary.path)
            try text.write(toFile: directory + "/" + unit, atomically: true, encoding: .utf8)
        }
        for unit in units {
            let verified = try run(Self.analyze, ["verify", "--man=no", directory + "/" + unit])
            #expect(verified.status == 0 && verified.errors.isEmpty && verified.output.isEmpty, "\(unit): \(verified)")
        }
    }

    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: activate), "systemd-socket-activate is not installed")
    )
    func theDaemonServesTheSocketSystemdHandsItAndLeavesItToSystemd() throws {
        let (directory, socket) = try CrossProcessTests.daemonDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // systemd-socket-activate binds the socket, then runs the daemon with it as descriptor 3.
        let activator = Process()
        activator.executableURL = URL(fileURLWithPath: Self.activate)
        activator.arguments = ["-l", socket, Paths.binary.path, "daemon", "--exit-when-idle", "1"]
        activator.environment = CrossProcessTests.environment()
        activator.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        activator.standardError = errors
        try activator.run()
        // SIGKILL: systemd-socket-activate outlives a SIGTERM while it waits for a connection.
        defer { if activator.isRunning { kill(activator.processIdentifier, SIGKILL); activator.waitUntilExit() } }
        // The socket file shows before it listens (bind, then listen): connected to, it serves.
        var connected: ControlClient?
        try #require(
            eventually(.seconds(10)) {
                connected = try? ControlClient(socketPath: socket); return connected != nil
            },
            "nothing serves \(socket)")
        let client = connected!
        guard case .int(let pid)? = client.server["pid"] else { Issue.record("no pid in \(client.server)"); return }
        #expect(Int32(pid) == activator.processIdentifier, "the daemon is not the program systemd-socket-activate ran")
        client.close()

        // A command coordinating outside any mount goes through it.
        let file = directory + "/item"
        let held = try run(
            Paths.binary.path, ["coordinate", "--write", file, "--", "/bin/sh", "-c", "echo held > \"$0\"", file],
            environment: CrossProcessTests.environment(socket: socket))
        #expect(held.status == 0, "\(held)")
        #expect((try? String(contentsOfFile: file, encoding: .utf8)) == "held\n")

        // Idle, it ends cleanly, and the socket stays: it is systemd's, not the daemon's.
        #expect(eventually(.seconds(15)) { !activator.isRunning }, "the daemon did not end when idle")
        activator.waitUntilExit()
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(activator.terminationStatus == 0, "\(said)")
        #expect(said.contains("socket from systemd"), "\(said)")
        #expect(FileManager.default.fileExists(atPath: socket), "the daemon removed the socket systemd handed it")
    }
}
