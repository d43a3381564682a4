import ArgumentParser
import CoordinationClient
import CoordinationWire
import Foundation
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs services PATH [--connect NAME]`.
struct Services: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the named services of an item, or connect standard input and output to one.",
        discussion: """
            Each line lists a service: NAME, the item it was vended for, and the provider's pid; --json \
            prints them as one object. With --connect, the relay ends with the provider's close. Exit \
            status: 0 (also when the item has no services: a line on standard error says so); 1 with \
            the reason on standard error; 64 for a command line it cannot take.
            """
    )

    @Argument(help: "An item inside a coordfs mount (or anywhere, with the daemon).", completion: .file())
    var path: String

    @Option(
        help:
            "Connect to this service, as nc -U: standard input goes to the provider (its end half-closes the connection), what it sends to standard output, until it closes."
    )
    var connect: String?

    @Option(help: "The control socket (default: found from the path).")
    var socket: String?

    @Flag(
        name: [.customShort("J"), .long],
        help:
            "Print the list as one JSON object: the path and its services, each with name, path and pid (docs/json.md)."
    )
    var json = false

    func validate() throws {
        if json && connect != nil { throw ValidationError("--json lists services; it does not go with --connect") }
    }

    func run() throws {
        let resolved = ServerConnection.resolve(path)
        let client = try ServerConnection.connect(for: resolved, explicit: socket)
        guard let name = connect else {
            let fields: [String: WireValue]
            do { fields = try client.request { .services(id: $0, path: resolved) } } catch {
                throw CommandFailure("\(error)")
            }
            if json {
                let services: WireValue = fields["services"] ?? .array([])
                print(
                    String(
                        decoding: WireCodec.encode(object: ["path": .string(resolved), "services": services])
                            .dropLast(), as: UTF8.self))
                return
            }
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
        // A reader of our output that has gone is an end, as for nc: EPIPE, not a signal.
        signal(SIGPIPE, SIG_IGN)
        try withExtendedLifetime(connection) { try Relay.run(connection: connection.fileDescriptor) }
    }
}

/// Copies bytes between a service's connection and standard input and output, as `nc -U`
/// does: what the provider sends is printed as it comes; at the end of standard input the
/// connection is half-closed, so that the provider reads its end of file; and the provider's
/// close ends the relay. One thread on poll(2), read(2) and send(2): Foundation's
/// `FileHandle.availableData` traps on a read error, and a provider that answers and closes
/// with bytes of ours unread resets the connection (ECONNRESET), which is its end, not a failure.
enum Relay {
    static func run(
        connection: Int32, input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO
    ) throws(CommandFailure) {
        var fromProvider = [UInt8](repeating: 0, count: 65_536), fromInput = [UInt8](repeating: 0, count: 65_536)
        // What was read from the input and not yet sent. The input is read again only once it
        // is all sent: a provider that reads slowly holds up our input, never what it sends us.
        var unsent = 0..<0
        var inputOpen = true
        while true {
            var watched = [
                pollfd(fd: connection, events: Int16(POLLIN) | (unsent.isEmpty ? 0 : Int16(POLLOUT)), revents: 0)
            ]
            if inputOpen && unsent.isEmpty { watched.append(pollfd(fd: input, events: Int16(POLLIN), revents: 0)) }
            do throws(Errno) {
                _ = try retryingInterrupts { poll(&watched, nfds_t(watched.count), -1) }
            } catch { throw CommandFailure("poll: \(error)") }
            let connectionEvents = watched[0].revents
            if connectionEvents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let count: Int
                do throws(Errno) {
                    count = try retryingInterrupts { read(connection, &fromProvider, fromProvider.count) }
                } catch {
                    if error == .connectionReset { return }  // closed with bytes of ours unread
                    if error == .resourceTemporarilyUnavailable { continue }
                    throw CommandFailure("the connection to the service failed: \(error)")
                }
                if count == 0 { return }  // the provider closed its side
                guard try write(fromProvider[..<count], to: output) else { return }
            }
            if !unsent.isEmpty && connectionEvents & Int16(POLLOUT | POLLHUP | POLLERR) != 0 {
                let sent: Int
                do throws(Errno) {
                    sent = try retryingInterrupts {
                        fromInput[unsent].withUnsafeBytes {
                            Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                        }
                    }
                } catch {
                    if error == .brokenPipe || error == .connectionReset {
                        // The provider reads no more: what it still sends is printed until it closes.
                        unsent = 0..<0
                        inputOpen = false
                        continue
                    }
                    if error == .resourceTemporarilyUnavailable { continue }
                    throw CommandFailure("the connection to the service failed: \(error)")
                }
                unsent = unsent.lowerBound + sent..<unsent.upperBound
            }
            if watched.count > 1 && watched[1].revents != 0 {
                var count = 0
                // POLLNVAL: no standard input at all, read as an empty one.
                if watched[1].revents & Int16(POLLNVAL) == 0 {
                    do throws(Errno) {
                        count = try retryingInterrupts { read(input, &fromInput, fromInput.count) }
                    } catch {
                        if error == .resourceTemporarilyUnavailable { continue }
                        throw CommandFailure("cannot read standard input: \(error)")
                    }
                }
                if count > 0 {
                    unsent = 0..<count
                } else {
                    // As nc -N: the provider reads its end of file, and may still answer.
                    inputOpen = false
                    shutdown(connection, Int32(SHUT_WR))
                }
            }
        }
    }

    /// Writes all of `bytes`; false when the output's reader has gone (EPIPE: the command
    /// ignores SIGPIPE).
    private static func write(_ bytes: ArraySlice<UInt8>, to output: Int32) throws(CommandFailure) -> Bool {
        var rest = bytes
        while !rest.isEmpty {
            let written: Int
            do throws(Errno) {
                written = try retryingInterrupts {
                    rest.withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
                }
            } catch {
                if error == .brokenPipe { return false }
                if error == .resourceTemporarilyUnavailable {
                    // An output left non-blocking by whoever started us: wait for room.
                    var room = pollfd(fd: output, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&room, 1, -1)
                    continue
                }
                throw CommandFailure("cannot write standard output: \(error)")
            }
            rest = rest.dropFirst(written)
        }
        return true
    }
}
