@testable import CoordinationServer
import CoordinationClient
import CoordinationWire
import FileCoordination
import Foundation
import Testing

/// A `status` reply reaches its client whatever its size: past what a client's line may be, up
/// to the reply limit, and past that with entries left out and counted, never dropped.
@Suite struct StatusReplyTests {
    @Test func aStatusPastSixtyFourKibibytesReachesTheClient() throws {
        let servers = ClientLimitsTests()
        try servers.withServer(servers.limits(holds: 1000)) { server, directory in
            let holder = try RawClient(server.socketPath)
            #expect(try holder.greet())
            let count = 800
            for n in 0..<count {
                let reply = try holder.ask(
                    .hold(
                        id: 10 + n,
                        intents: [WireIntent(path: directory + "/an-item-with-a-longer-name-\(n)", access: .read)],
                        wait: false, timeout: nil, inherit: false))
                guard case .ok? = reply else { Issue.record("hold \(n): \(String(describing: reply))"); return }
            }
            let client = try ControlClient(socketPath: server.socketPath)
            let answered = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var reply: Result<[String: WireValue], ControlError>?
            _ = client.request({ .status(id: $0) }) { result in
                reply = result
                answered.signal()
            }
            // Before, the line was dropped by the client and this waited for ever.
            #expect(answered.wait(timeout: .now() + 10) == .success, "no reply to status")
            guard case .success(let fields)? = reply, case .array(let holders)? = fields["holders"] else {
                Issue.record("\(String(describing: reply))"); return
            }
            #expect(holders.count == count)
            #expect(WireCodec.encode(ServerMessage.ok(id: 1, fields: fields)).count > WireProtocol.maximumLineLength)
            #expect(fields["omitted"] == nil)
        }
    }

    /// However much a server holds, a reply is one page (C27): the first carries at most
    /// `statusPageLimit` entries of each list, counts them all, and says where each list goes
    /// on; the client reads the rest a list at a time and sees every entry once.
    @Test func aStatusIsAPageAndTheClientReadsTheRestAfterIt() throws {
        let servers = ClientLimitsTests()
        let count = ControlServer.statusPageLimit * 2 + 300
        try servers.withServer(servers.limits(holds: count + 10)) { server, directory in
            let holder = try RawClient(server.socketPath)
            #expect(try holder.greet())
            for n in 0..<count {
                let reply = try holder.ask(
                    .hold(
                        id: 10 + n, intents: [WireIntent(path: directory + "/item-\(n)", access: .read)], wait: false,
                        timeout: nil, inherit: false))
                guard case .ok? = reply else { Issue.record("hold \(n): \(String(describing: reply))"); return }
            }
            let client = try ControlClient(socketPath: server.socketPath)
            defer { client.close() }
            let first = try client.request { .status(id: $0) }
            guard case .array(let holders)? = first["holders"], case .object(let totals)? = first["totals"],
                case .object(let next)? = first["next"]
            else { Issue.record("no page: \(first)"); return }
            #expect(holders.count == ControlServer.statusPageLimit)
            #expect(totals["holders"] == .int(count) && totals["presenters"] == .int(0))
            #expect(next["holders"] != nil && next["presenters"] == nil)

            // A page of one list carries that list alone, as many as asked.
            guard case .int(let cursor)? = next["holders"] else { Issue.record("no cursor"); return }
            let second = try client.request {
                .status(id: $0, page: StatusPage(list: .holders, after: cursor, limit: 7))
            }
            guard case .array(let seven)? = second["holders"] else { Issue.record("\(second)"); return }
            #expect(seven.count == 7 && second["hosts"] == nil)

            let whole = try client.wholeStatus()
            guard case .array(let all)? = whole["holders"] else { Issue.record("\(whole)"); return }
            let paths = all.compactMap { entry -> String? in
                guard case .object(let fields) = entry, case .array(let intents)? = fields["intents"],
                    case .object(let intent)? = intents.first, case .string(let path)? = intent["path"]
                else { return nil }
                return path
            }
            #expect(paths.count == count && Set(paths).count == count, "every hold once")
            #expect(whole["next"] == nil)
        }
    }

    @Test func aPageRequestThatCannotBeTakenIsRefused() throws {
        for line in [
            #"{"id":1,"op":"status","list":"locks"}"#, #"{"id":1,"op":"status","after":3}"#,
            #"{"id":1,"op":"status","list":"holders","after":-1}"#, #"{"id":1,"op":"status","limit":0}"#
        ] {
            #expect(throws: WireError.self, "\(line)") { try WireCodec.decodeClient(Array(line.utf8)) }
        }
    }

    @Test func pastTheLimitEntriesAreLeftOutAndCounted() throws {
        let entry = WireValue.object([
            "identity": .string("pid:1234#5"), "pid": .int(1234),
            "path": .string("/tmp/" + String(repeating: "x", count: 80))
        ])
        let fields: [String: WireValue] = [
            "root": .string("/"), "holders": .array(Array(repeating: entry, count: 100)),
            "waiters": .array([entry]), "presenters": .array(Array(repeating: entry, count: 400))
        ]
        let whole = WireCodec.encode(ServerMessage.ok(id: 7, fields: fields))
        let limit = 16_384
        let line = StatusReply.line(id: 7, fields: fields, limit: limit)
        #expect(whole.count > limit && line.count <= limit, "\(whole.count) -> \(line.count)")
        guard case .ok(7, let kept) = try WireCodec.decodeServer(Array(line.dropLast())),
            case .array(let holders)? = kept["holders"], case .array(let presenters)? = kept["presenters"],
            case .object(let omitted)? = kept["omitted"]
        else {
            Issue.record("not a status reply"); return
        }
        let omittedHolders: Int = if case .int(let n)? = omitted["holders"] { n } else { 0 }
        let omittedPresenters: Int = if case .int(let n)? = omitted["presenters"] { n } else { 0 }
        #expect(holders.count + omittedHolders == 100 && presenters.count + omittedPresenters == 400)
        #expect(omittedPresenters > 0 && kept["waiters"] == .array([entry]))
        // Within the limit, the reply is the whole.
        #expect(StatusReply.line(id: 7, fields: fields) == whole)
    }
}
