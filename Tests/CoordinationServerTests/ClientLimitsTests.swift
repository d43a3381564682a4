@testable import CoordinationServer
import CoordinationClient
import CoordinationRuntime
import CoordinationWire
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What one user may take of a server: connections, watches, holds and memory are bounded, a
/// refusal says which limit and why, and what is given back can be taken again.
@Suite struct ClientLimitsTests {
    /// A server with `limits` on a socket in a fresh directory, and the directory (for items).
    /// `mode` is the socket's: 0o666 lets other users connect.
    func withServer(_ limits: ClientLimits, mode: mode_t = 0o600, _ body: (ControlServer, String) throws -> Void) throws
    {
        let directory = "/tmp/coordfs-limits-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let domain = CoordinationDomain()
        let server = ControlServer(
            socketPath: directory + "/s.sock", mode: mode, domain: domain,
            resolver: HostItemResolver(domain: domain), root: "/", limits: limits)
        try server.start()
        defer { server.stop() }
        try body(server, directory)
    }

    func limits(
        connections: Int = 100, perUser: Int = 100, watches: Int = 100, holds: Int = 100, services: Int = 100,
        hello: Duration = .seconds(10), memory: Int = ClientLimits.standard.memoryPerUser
    ) -> ClientLimits {
        ClientLimits(
            connections: connections, connectionsPerUser: perUser, watchesPerUser: watches, holdsPerConnection: holds,
            servicesPerConnection: services, helloTimeout: hello, memoryPerUser: memory)
    }

    /// What a hold of one item of a server's directory (`item0` … `item9`, whose paths are all
    /// as long) is counted as against its user's memory.
    static let oneItemHold = ClientLimits.bytes(ofHoldOn: ["/tmp/coordfs-limits-12345678/item0"])

    /// Asks `client` to hold item `n` of `directory` (read, or write), without waiting.
    func hold(
        _ client: RawClient, _ n: Int, in directory: String, access: WireIntent.Access = .read
    ) throws -> ServerMessage? {
        try client.ask(
            .hold(
                id: 10 + n, intents: [WireIntent(path: directory + "/item\(n)", access: access)],
                wait: false, timeout: nil, inherit: false))
    }

    /// `count` requests made by `make` (given 0, 1, …), each granted: the `field` number of each
    /// reply, or nil (recorded) at the first refused.
    func granted(_ count: Int, _ field: String, _ make: (Int) throws -> ServerMessage?) throws -> [Int] {
        var numbers: [Int] = []
        for n in 0..<count {
            let reply = try make(n)
            guard case .ok(_, let fields)? = reply, case .int(let number)? = fields[field] else {
                // Fails the test here: nothing after it could be judged.
                throw GrantRefused(description: "request \(n) refused: \(String(describing: reply))")
            }
            numbers.append(number)
        }
        return numbers
    }

    struct GrantRefused: Error, CustomStringConvertible { let description: String }

    /// `reply` granted, or the test fails here with `what`.
    func expectOK(_ reply: ServerMessage?, _ what: String) throws {
        guard case .ok? = reply else { throw GrantRefused(description: "\(what): \(String(describing: reply))") }
    }

    func isError(_ reply: ServerMessage?, _ errno: String, saying text: String) -> Bool {
        guard case .error(_, let code, let message)? = reply else { return false }
        return code == errno && message.contains(text)
    }

    @Test func oneUsersConnectionsAreBoundedAndTheRefusalSaysWhy() throws {
        try withServer(limits(perUser: 3)) { server, directory in
            let socket = server.socketPath
            var open = try (0..<3).map { _ in try RawClient(socket) }
            for client in open { #expect(try client.greet()) }
            let fourth = try RawClient(socket)
            #expect(
                isError(try fourth.receive(), "EMFILE", saying: "too many connections of uid \(getuid()) (at most 3)"))
            #expect(try fourth.receive() == nil, "and closed")
            // The client library fails its hello with the server's reason.
            do {
                _ = try ControlClient(socketPath: socket)
                Issue.record("a fourth connection was let in")
            } catch let error as ControlError {
                #expect(error.errno == "EMFILE" && error.message.contains("at most 3"), "\(error)")
            }
            // One given back can be taken again, once the server has seen it close.
            open.removeLast()
            #expect(eventually { (try? RawClient(socket).greet()) == true })
        }
    }

    @Test func allUsersConnectionsAreBoundedToo() throws {
        try withServer(limits(connections: 2)) { server, _ in
            let kept = try (0..<2).map { _ in try RawClient(server.socketPath) }
            for client in kept { #expect(try client.greet()) }
            #expect(
                isError(
                    try RawClient(server.socketPath).receive(), "EMFILE", saying: "too many connections (at most 2)"))
        }
    }

    @Test func oneUsersWatchesAreBoundedOverAllTheirConnections() throws {
        try withServer(limits(watches: 4)) { server, directory in
            let first = try RawClient(server.socketPath), second = try RawClient(server.socketPath)
            #expect(try first.greet() && second.greet())
            func watch(_ client: RawClient, _ n: Int) throws -> ServerMessage? {
                try client.ask(.watch(id: 10 + n, path: directory + "/item\(n)", mask: .all))
            }
            let descriptors = try granted(3, "wd", { try watch(first, $0) })
            guard case .ok? = try watch(second, 3) else { Issue.record("the fourth watch refused"); return }
            let limit = "too many watches of uid \(getuid()) (at most 4)"
            #expect(isError(try watch(second, 4), "ENOSPC", saying: limit))
            #expect(isError(try watch(first, 5), "ENOSPC", saying: limit), "counted per user, not per connection")
            // Unwatching gives one back; a closed connection gives back all it had.
            guard case .ok? = try first.ask(.unwatch(id: 20, wd: descriptors[0])) else {
                Issue.record("unwatch"); return
            }
            guard case .ok? = try watch(second, 6) else { Issue.record("a watch given back was not"); return }
            #expect(isError(try watch(second, 7), "ENOSPC", saying: limit))
            first.close()  // its two watches go with it
            #expect(eventually { if case .ok? = try? watch(second, 8) { return true } else { return false } })
            guard case .ok? = try watch(second, 9) else { Issue.record("the second watch given back"); return }
            #expect(isError(try watch(second, 10), "ENOSPC", saying: limit))
        }
    }

    @Test func oneConnectionsHoldsAreBoundedAndAReleaseGivesOneBack() throws {
        try withServer(limits(holds: 2)) { server, directory in
            let client = try RawClient(server.socketPath)
            #expect(try client.greet())
            func hold(_ n: Int) throws -> ServerMessage? {
                try client.ask(
                    .hold(
                        id: 10 + n, intents: [WireIntent(path: directory + "/item\(n)", access: .read)],
                        wait: false, timeout: nil, inherit: false))
            }
            let held = try granted(2, "hold", hold)
            #expect(isError(try hold(2), "ENOSPC", saying: "too many holds on one connection (at most 2"))
            guard case .ok? = try client.ask(.release(id: 30, hold: held[0], changed: false)) else {
                Issue.record("release"); return
            }
            guard case .ok? = try hold(3) else { Issue.record("a hold given back was not"); return }
            // Another connection has its own.
            let other = try RawClient(server.socketPath)
            #expect(try other.greet())
            let reply = try other.ask(
                .hold(
                    id: 1, intents: [WireIntent(path: directory + "/item9", access: .read)],
                    wait: false, timeout: nil, inherit: false))
            guard case .ok? = reply else { Issue.record("\(String(describing: reply))"); return }
        }
    }

    @Test func oneUsersHoldsAreBoundedByTheirMemoryOverAllTheirConnections() throws {
        // Room for three holds of one item, not four.
        let memory = Self.oneItemHold * 7 / 2
        try withServer(limits(memory: memory)) { server, directory in
            let first = try RawClient(server.socketPath), second = try RawClient(server.socketPath)
            #expect(try first.greet() && second.greet())
            let held = try granted(2, "hold", { try hold(first, $0, in: directory) })
            try expectOK(try hold(second, 2, in: directory), "the third hold refused")
            let limit = "too much memory of uid \(getuid()) (at most \(memory) bytes"
            #expect(isError(try hold(second, 3, in: directory), "ENOMEM", saying: limit))
            #expect(
                isError(try hold(first, 4, in: directory), "ENOMEM", saying: limit),
                "counted per user, not per connection")
            #expect(
                server.counts.memory(of: getuid()) > 2 * Self.oneItemHold
                    && server.counts.memory(of: getuid()) <= memory)
            // A release gives its hold's memory back; a closed connection gives back its holds'.
            try expectOK(try first.ask(.release(id: 30, hold: held[0], changed: false)), "release")
            try expectOK(try hold(second, 5, in: directory), "memory given back was not")
            #expect(isError(try hold(second, 6, in: directory), "ENOMEM", saying: limit))
            first.close()  // its one hold left goes with it
            #expect(
                eventually { if case .ok? = try? hold(second, 7, in: directory) { return true } else { return false } })
            #expect(isError(try hold(second, 8, in: directory), "ENOMEM", saying: limit))
            second.close()
            #expect(eventually { server.counts.memory(of: getuid()) == 0 }, "nothing is counted once nothing is held")
        }
    }

    /// A status page its user's memory has no room for is refused with ENOMEM, and the
    /// connection goes on: a smaller page is answered. (Sent, a page larger than the socket
    /// takes at once passed the user's memory as it waited, and the connection was given up:
    /// the hostile soak's users saw their status requests end their connections.)
    @Test func aStatusPagePastTheUsersMemoryIsRefusedAndTheConnectionLives() throws {
        let memory = Self.oneItemHold * 40
        try withServer(limits(holds: 200, memory: memory)) { server, directory in
            let holder = try RawClient(server.socketPath)
            #expect(try holder.greet())
            // Holds until the memory is nearly taken: the status of them is larger than what is left.
            var held = 0
            for n in 0..<200 {
                guard case .ok? = try hold(holder, 10 + n, in: directory) else { break }
                held += 1
            }
            #expect(held > 20, "holds granted: \(held)")
            let asker = try RawClient(server.socketPath)
            #expect(try asker.greet())
            let reply = try asker.ask(.status(id: 5, page: StatusPage(limit: 10_000)))
            #expect(isError(reply, "ENOMEM", saying: "status page"), "\(String(describing: reply))")
            guard case .ok? = try asker.ask(.status(id: 6, page: StatusPage(list: .services, limit: 1))) else {
                Issue.record("the connection was not served after the refusal"); return
            }
        }
    }

    /// A hold waited for counts as a granted one does, until it is given up.
    @Test func aHoldWaitedForCountsUntilItIsCancelled() throws {
        let memory = Self.oneItemHold * 5 / 2
        try withServer(limits(memory: memory)) { server, directory in
            let holder = try RawClient(server.socketPath), waiter = try RawClient(server.socketPath)
            #expect(try holder.greet() && waiter.greet())
            try expectOK(try hold(holder, 0, in: directory, access: .write), "the write hold refused")
            waiter.send(
                .hold(
                    id: 3, intents: [WireIntent(path: directory + "/item0", access: .write)], wait: true, timeout: nil,
                    inherit: false))
            #expect(
                eventually { server.counts.memory(of: getuid()) > Self.oneItemHold * 3 / 2 },
                "the waiting hold is counted")
            let limit = "too much memory of uid \(getuid()) (at most \(memory) bytes"
            #expect(isError(try hold(holder, 1, in: directory), "ENOMEM", saying: limit))
            // Cancelled: its refusal and the cancel's answer, in either order.
            waiter.send(.cancel(id: 4, request: 3))
            let answers = try [waiter.receive(), waiter.receive()]
            #expect(
                answers.contains {
                    if case .error(let id, let errno, _)? = $0 { id == 3 && errno == "ECANCELED" } else { false }
                }, "\(answers)")
            #expect(answers.contains { if case .ok(let id, _)? = $0 { id == 4 } else { false } }, "\(answers)")
            #expect(eventually { server.counts.memory(of: getuid()) < Self.oneItemHold * 3 / 2 })
            try expectOK(try hold(holder, 1, in: directory), "the cancelled hold's memory was not given back")
        }
    }

    /// One user past their memory is refused alone: another user (nobody, uid 65534, through
    /// setpriv) holds as before, within a share of their own.
    @Test(.enabled(if: geteuid() == 0, "another user's connection needs root (setpriv)"))
    func oneUserPastTheirMemoryLeavesAnotherUsersHoldsAlone() throws {
        // Room for one hold of one item a user, not two.
        let memory = Self.oneItemHold * 3 / 2
        try withServer(limits(memory: memory), mode: 0o666) { server, directory in
            chmod(directory, 0o755)  // theirs to read, whatever the umask
            let mine = try RawClient(server.socketPath)
            #expect(try mine.greet())
            try expectOK(try hold(mine, 0, in: directory), "the first hold refused")
            let limit = "too much memory of uid \(getuid()) (at most \(memory) bytes"
            #expect(isError(try hold(mine, 1, in: directory), "ENOMEM", saying: limit))
            let theirs = try holdsAsNobody(on: server.socketPath, of: [directory + "/item2", directory + "/item3"])
            #expect(theirs == ["held", "ENOMEM"], "their first hold granted, their second past their own share")
            #expect(
                isError(try hold(mine, 4, in: directory), "ENOMEM", saying: limit), "and this user is still past theirs"
            )
        }
    }

    /// How holds of `paths` (one each, read, not waiting) on a connection of nobody's are
    /// answered: "held", or the errno, a line each.
    func holdsAsNobody(on socket: String, of paths: [String]) throws -> [String] {
        let process = Process(), output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments =
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                """
                import json, socket, sys
                s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1]); f = s.makefile("rwb", buffering=0)
                def ask(message):
                    f.write(json.dumps(message).encode() + b"\\n"); return json.loads(f.readline())
                ask({"op": "hello", "id": 1, "version": 1})
                for n, path in enumerate(sys.argv[2:]):
                    reply = ask({"op": "hold", "id": 2 + n, "intents": [{"path": path, "access": "read"}], "wait": False})
                    print(reply.get("error", "held"), flush=True)
                """, socket
            ] + paths
        process.standardOutput = output
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: printed, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// A timeout no `Duration` holds (one such line took a shared mount down): that request is
    /// refused, saying why, the client goes on, and the server serves the next client.
    @Test(arguments: ["1e16", "-1", "1e400", "NaN"])
    func aTimeoutPastAnyBoundIsRefusedAndTheServerLives(_ timeout: String) throws {
        try withServer(limits()) { server, directory in
            let client = try RawClient(server.socketPath)
            #expect(try client.greet())
            let line =
                #"{"op":"hold","id":2,"intents":[{"path":"\#(directory)/item","access":"write"}],"timeout":\#(timeout)}"#
                + "\n"
            _ = line.withCString { write(client.fd, $0, strlen($0)) }
            let reply = try client.receive()
            // A number JSON reads is refused with the request alone; one it cannot read is no
            // request at all, and ends the connection.
            let readable = Double(timeout)?.isFinite == true
            guard case .error(let id, let errno, _)? = reply,
                readable ? (id == 2 && errno == "EINVAL") : (id == nil && errno == "EPROTO")
            else {
                Issue.record("a timeout of \(timeout) was answered \(String(describing: reply))")
                return
            }
            if readable {
                guard case .ok? = try client.ask(.status(id: 3)) else {
                    Issue.record("the client was not served after the refusal"); return
                }
            }
            let next = try RawClient(server.socketPath)
            #expect(try next.greet())
            let held = try next.ask(
                .hold(
                    id: 3, intents: [WireIntent(path: directory + "/item", access: .write)],
                    wait: false, timeout: 1e9, inherit: false))
            guard case .ok? = held else {
                Issue.record("the server did not serve the next client: \(String(describing: held))"); return
            }
        }
    }

    @Test func oneConnectionsServicesAreBoundedAndAWithdrawalGivesOneBack() throws {
        try withServer(limits(services: 2)) { server, directory in
            let client = try RawClient(server.socketPath)
            #expect(try client.greet())
            func vend(_ n: Int) throws -> ServerMessage? {
                try client.ask(.vend(id: 10 + n, name: "s\(n)", path: directory))
            }
            let vended = try granted(2, "service", vend)
            #expect(isError(try vend(2), "ENOSPC", saying: "too many services vended on one connection (at most 2)"))
            guard case .ok? = try client.ask(.withdraw(id: 30, service: vended[0])) else {
                Issue.record("withdraw"); return
            }
            guard case .ok? = try vend(3) else { Issue.record("a service given back was not"); return }
        }
    }

    @Test func aConnectionThatSaysNoHelloIsClosedAndGivesItsPlaceBack() throws {
        try withServer(limits(perUser: 1, hello: .milliseconds(300))) { server, _ in
            let silent = try RawClient(server.socketPath)
            #expect(
                isError(try RawClient(server.socketPath).receive(), "EMFILE", saying: "at most 1"),
                "the silent one has the place")
            #expect(isError(try silent.receive(), "EPROTO", saying: "no hello within"))
            #expect(try silent.receive() == nil, "and closed")
            var next: RawClient?
            #expect(
                eventually {
                    guard let client = try? RawClient(server.socketPath), (try? client.greet()) == true else {
                        return false
                    }
                    next = client
                    return true
                }, "its place is free again")
            // A greeted connection may stay silent as long as it likes.
            let greeted = try #require(next)
            usleep(500_000)
            guard case .ok? = try greeted.ask(.status(id: 2)) else {
                Issue.record("a greeted client was closed"); return
            }
        }
    }
}
