import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs services PATH [--connect NAME]`.
struct Services: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the named services of an item, or connect standard input and output to one.",
        discussion: "Each line lists a service: NAME, the item it was vended for, and the provider's pid."
    )

    @Argument(help: "An item inside a coordfs mount (or anywhere, with the daemon).")
    var path: String

    @Option(help: "Connect to this service: standard input goes to the provider, its answers to standard output.")
    var connect: String?

    @Option(help: "The control socket (default: found from the path).")
    var socket: String?

    func run() throws {
        let resolved = ServerConnection.resolve(path)
        let client = try ServerConnection.connect(for: resolved, explicit: socket)
        guard let name = connect else {
            let fields: [String: WireValue]
            do { fields = try client.request { .services(id: $0, path: resolved) } } catch { throw CommandFailure("\(error)") }
            guard case .array(let entries)? = fields["services"], !entries.isEmpty else {
                // On standard error, so that a script reading the list reads an empty one.
                FileHandle.standardError.write(Data("no services for \(resolved)\n".utf8))
                return
            }
            for case .object(let entry) in entries {
                var line = [String]()
                if case .string(let name)? = entry["name"] { line.append(name) }
                if case .string(let item)? = entry["path"] { line.append(item) }
                if case .int(let pid)? = entry["pid"] { line.append("pid \(pid)") }
                print(line.joined(separator: "  "))
            }
            return
        }
        let connection: FileHandle
        do { connection = try client.connect(service: name, at: resolved) } catch { throw CommandFailure("\(error)") }
        client.close()
        Relay.run(connection, input: FileHandle.standardInput, output: FileHandle.standardOutput)
    }
}

/// Copies bytes between a connection and a pair of handles until both directions end.
enum Relay {
    static func run(_ connection: FileHandle, input: FileHandle, output: FileHandle) {
        let fd = connection.fileDescriptor
        let outgoing = Thread {
            while case let data = input.availableData, !data.isEmpty {
                guard (try? connection.write(contentsOf: data)) != nil else { break }
            }
            shutdown(fd, Int32(SHUT_WR))
        }
        outgoing.start()
        while case let data = connection.availableData, !data.isEmpty {
            guard (try? output.write(contentsOf: data)) != nil else { break }
        }
    }
}
