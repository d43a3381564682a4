import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs vend NAME PATH -- CMD ARGS`: a provider, as inetd is: every connection runs CMD with
/// the connection as its standard input and output.
struct Vend: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Vend a named service for an item and everything inside it; each connection runs a command.",
        discussion: "Runs until interrupted; the service ends with it, and its clients' connections close."
    )

    @Argument(help: "The service's name (reverse-DNS by convention, at most 255 bytes).")
    var name: String

    @Argument(help: "The item (usually a directory) the service is for.")
    var path: String

    @Option(help: "The control socket (default: found from the path).")
    var socket: String?

    @Argument(parsing: .postTerminator, help: "The command each connection runs, after --.")
    var command: [String] = []

    func validate() throws {
        if name.isEmpty { throw ValidationError("a service name cannot be empty") }
        if name.utf8.count > 255 { throw ValidationError("a service name is at most 255 bytes") }
        if name.contains(where: \.isNewline) { throw ValidationError("a service name cannot hold a newline") }
        if command.isEmpty { throw ValidationError("name the command to run for each connection after --") }
    }

    func run() throws {
        Signals.resetInherited()
        let resolved = ServerConnection.resolve(path)
        let client = try ServerConnection.connect(for: resolved, explicit: socket)
        let command = self.command
        client.onServiceConnection { record, connection in
            Thread { Vend.serve(connection, record, command) }.start()
        }
        let ended = DispatchSemaphore(value: 0)
        client.onEnd { ended.signal() }
        do {
            _ = try client.request { .vend(id: $0, name: name, path: resolved) }
        } catch {
            throw CommandFailure("cannot vend '\(name)': \(error)")
        }
        FileHandle.standardError.write(Data("vending \(name) for \(resolved)\n".utf8))
        ended.wait()
        throw ServerConnection.closed(client)
    }

    /// Runs the command for one connection, relaying bytes both ways; the connection stays with
    /// this process, so it closes when the provider ends.
    static func serve(_ connection: FileHandle, _ record: EventRecord, _ command: [String]) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_SERVICE"] = record.name
        environment["COORDFS_ITEM"] = record.path
        environment["COORDFS_CLIENT_PID"] = String(record.cookie)
        process.environment = environment
        let toCommand = Pipe(), fromCommand = Pipe()
        process.standardInput = toCommand
        process.standardOutput = fromCommand
        guard (try? process.run()) != nil else { return }
        Thread {
            while case let data = connection.availableData, !data.isEmpty {
                guard (try? toCommand.fileHandleForWriting.write(contentsOf: data)) != nil else { break }
            }
            try? toCommand.fileHandleForWriting.close()
        }.start()
        while case let data = fromCommand.fileHandleForReading.availableData, !data.isEmpty {
            guard (try? connection.write(contentsOf: data)) != nil else { break }
        }
        process.waitUntilExit()
        shutdown(connection.fileDescriptor, Int32(SHUT_RDWR))
    }
}
