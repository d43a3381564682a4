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
