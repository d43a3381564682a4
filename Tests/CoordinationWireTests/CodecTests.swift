import CoordinationWire
import Foundation
import TestSupport
import Testing

@Suite struct CodecTests {
    /// Golden lines: each decodes to the value and the value encodes back to the same bytes.
    static let golden: [(String, ClientMessage)] = [
        (#"{"id":1,"op":"hello","version":1}"#, .hello(id: 1, version: 1)),
        (
            #"{"id":2,"mask":["RELINQUISH_READER","SAVE","CHANGED"],"op":"watch","path":"/m/a"}"#,
            .watch(id: 2, path: "/m/a", mask: [.relinquishToReader, .save, .changed])
        ),
        (#"{"id":3,"op":"unwatch","wd":4}"#, .unwatch(id: 3, wd: 4)),
        (#"{"cookie":9,"errno":13,"op":"answer"}"#, .answer(cookie: 9, errno: 13)),
        (
            #"{"id":5,"inherit":true,"intents":[{"access":"read","path":"/m/a"},{"access":"write","options":["forMoving"],"path":"/m/b"}],"op":"hold","timeout":2.5,"wait":false}"#,
            .hold(
                id: 5,
                intents: [
                    WireIntent(path: "/m/a", access: .read),
                    WireIntent(path: "/m/b", access: .write, options: ["forMoving"])
                ],
                wait: false, timeout: 2.5, inherit: true)
        ),
        (#"{"changed":false,"hold":6,"id":7,"op":"release"}"#, .release(id: 7, hold: 6, changed: false)),
        (#"{"id":8,"op":"cancel","request":5}"#, .cancel(id: 8, request: 5)),
        (#"{"id":9,"op":"status"}"#, .status(id: 9)),
        (
            #"{"after":41,"id":9,"limit":500,"list":"presenters","op":"status"}"#,
            .status(id: 9, page: StatusPage(list: .presenters, after: 41, limit: 500))
        ),
        (#"{"cookie":9,"op":"working"}"#, .working(cookie: 9))
    ]

    @Test func goldenClientLinesRoundTrip() throws {
        for (line, message) in Self.golden {
            #expect(try WireCodec.decodeClient(Array(line.utf8)) == message, "\(line)")
            #expect(String(decoding: WireCodec.encode(message), as: UTF8.self) == line + "\n")
        }
    }

    /// A change of attributes alone carries METADATA_ONLY beside its event: what inotify tells
    /// as ATTRIB rather than MODIFY.
    @Test func aChangeOfAttributesAloneIsFlagged() throws {
        let event = ServerMessage.event(
            EventRecord(wd: 2, mask: [.subitemChanged, .metadataOnly], cookie: 0, name: "f", path: "/m/d/f"))
        #expect(
            String(decoding: WireCodec.encode(event), as: UTF8.self)
                == #"{"cookie":0,"events":["SUBITEM_CHANGED","METADATA_ONLY"],"mask":4198400,"name":"f","path":"/m/d/f","wd":2}"#
                + "\n")
        #expect(try WireCodec.decodeServer(WireCodec.encode(event)) == event)
    }

    @Test func eventsAndRepliesRoundTrip() throws {
        let event = ServerMessage.event(
            EventRecord(wd: 1, mask: [.save, .request], cookie: 7, name: "", path: "/m/doc"))
        let line = String(decoding: WireCodec.encode(event), as: UTF8.self)
        #expect(
            line == #"{"cookie":7,"events":["SAVE","REQUEST"],"mask":1073741828,"name":"","path":"/m/doc","wd":1}"#
                + "\n")
        #expect(try WireCodec.decodeServer(WireCodec.encode(event)) == event)
        // docs/protocol.md: who made the access, as flat fields beside the event's own.
        let told = ServerMessage.event(
            EventRecord(
                wd: 1, mask: [.changed], cookie: 0, name: "", path: "/m/doc",
                origin: EventOrigin(via: "mount", pid: 42, uid: 1000, command: "cat")))
        #expect(
            String(decoding: WireCodec.encode(told), as: UTF8.self)
                == #"{"command":"cat","cookie":0,"events":["CHANGED"],"mask":256,"name":"","path":"/m/doc","pid":42,"uid":1000,"via":"mount","wd":1}"#
                + "\n")
        #expect(try WireCodec.decodeServer(WireCodec.encode(told)) == told)
        // A reply with a "wd" field is a reply, not an event.
        let reply = ServerMessage.ok(id: 2, fields: ["wd": .int(3), "path": .string("/m/doc")])
        #expect(try WireCodec.decodeServer(WireCodec.encode(reply)) == reply)
        let error = ServerMessage.error(id: 4, errno: "EACCES", message: "no")
        #expect(try WireCodec.decodeServer(WireCodec.encode(error)) == error)
    }

    /// Nested fields, sorted keys at every level, and every kind of character a path may hold.
    @Test func repliesEscapeAndNestExactly() throws {
        let name = "a \"b\"\\c\nd\u{1}é"
        let reply = ServerMessage.ok(
            id: 5,
            fields: [
                "holders": .array([.object(["pid": .int(-3), "path": .string("/m/" + name), "ok": .bool(false)])]),
                "empty": .array([]), "none": .object([:])
            ])
        let line = String(decoding: WireCodec.encode(reply), as: UTF8.self)
        #expect(
            line
                == #"{"empty":[],"holders":[{"ok":false,"path":"/m/a \"b\"\\c\nd\u0001é","pid":-3}],"id":5,"none":{},"ok":true}"#
                + "\n")
        #expect(try WireCodec.decodeServer(Array(line.utf8).dropLast()) == reply)
    }

    @Test func answersTakeErrnoNamesAndDefaults() throws {
        #expect(
            try WireCodec.decodeClient(Array(#"{"op":"answer","cookie":3,"errno":"EACCES"}"#.utf8))
                == .answer(cookie: 3, errno: 13))
        #expect(try WireCodec.decodeClient(Array(#"{"op":"answer","cookie":3}"#.utf8)) == .answer(cookie: 3, errno: 0))
        #expect(
            try WireCodec.decodeClient(Array(#"{"op":"watch","id":1,"path":"/x"}"#.utf8))
                == .watch(id: 1, path: "/x", mask: .all))
    }

    /// Every errno a refusal travels with comes back as itself: ENOLCK (a host of a shared store
    /// that may grant nothing) once came back to a Swift program as EIO, its name unknown. One
    /// the table lacks travels as "E" and its number.
    @Test func errnoNamesComeBackAsTheirNumbers() {
        for code in [ENOLCK, ESTALE, EDQUOT, ENOTCONN, EXDEV, EMFILE] {
            #expect(ErrnoNames.code(of: ErrnoNames.name(of: code)) == code, "\(ErrnoNames.name(of: code))")
        }
        #expect(ErrnoNames.name(of: ENOLCK) == "ENOLCK")
        #expect(ErrnoNames.name(of: 131) == "E131" && ErrnoNames.code(of: "E131") == 131)
        for name in ["E", "E0", "E-5", "E+5", "E4096", "E12345", "E1x", "e5", "EWHAT"] {
            #expect(ErrnoNames.code(of: name) == nil, "\(name)")
        }
    }

    @Test(arguments: [
        "", "not json", "[1,2]", "42", #"{"id":1}"#, #"{"op":"launch","id":1}"#,
        #"{"op":"hello","id":"one","version":1}"#,
        #"{"op":"hello","id":true,"version":1}"#, #"{"op":"hello","id":1.5,"version":1}"#, #"{"op":"watch","id":1}"#,
        #"{"op":"watch","id":1,"path":""}"#, #"{"op":"watch","id":1,"path":"/a","mask":["NOPE"]}"#,
        #"{"op":"watch","id":1,"path":"/a","mask":-1}"#, #"{"op":"answer","cookie":-1}"#,
        #"{"op":"answer","cookie":1,"errno":"EWHAT"}"#,
        #"{"op":"hold","id":1,"intents":[]}"#, #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"execute"}]}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read","options":"x"}]}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read"}],"wait":"yes"}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read"}],"timeout":-3}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read"}],"timeout":1e16}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read"}],"timeout":1e400}"#,
        #"{"op":"hold","id":1,"intents":[{"path":"/a","access":"read"}],"timeout":-0.001}"#,
        #"{"op":"release","id":1}"#, #"{"op":"hello","id":1,"version":1"#
    ])
    func malformedLinesAreErrors(_ line: String) {
        #expect(throws: WireError.self) { try WireCodec.decodeClient(Array(line.utf8)) }
    }

    @Test func oversizedLinesAreErrors() {
        let path = String(repeating: "a", count: WireProtocol.maximumLineLength)
        #expect(throws: WireError.self) {
            try WireCodec.decodeClient(Array(#"{"op":"watch","id":1,"path":"/\#(path)"}"#.utf8))
        }
    }

    /// Random bytes, and valid lines with bytes flipped, dropped or repeated: the decoder answers
    /// every one with a message or an error, and never traps. Bounded and seeded.
    @Test func fuzzedInputNeverTraps() {
        var generator = SeededGenerator(seed: 0xC00D_F5)
        let valid = Self.golden.map { Array($0.0.utf8) }
        var decoded = 0, refused = 0
        for round in 0..<20_000 {
            var bytes: [UInt8]
            if round % 4 == 0 {
                bytes = (0..<Int.random(in: 0...80, using: &generator)).map { _ in
                    UInt8.random(in: 0...255, using: &generator)
                }
            } else {
                bytes = mangled(valid.randomElement(using: &generator)!, times: 1...4, using: &generator)
            }
            do { _ = try WireCodec.decodeClient(bytes); decoded += 1 } catch { refused += 1 }
            do { _ = try WireCodec.decodeServer(bytes) } catch {}
        }
        #expect(decoded + refused == 20_000)
        #expect(refused > 10_000, "most mutations are refused")
    }
}

/// Every timeout from a client or a command line goes through `Seconds`: what does not fit is
/// refused with a reason, never converted.
@Suite struct SecondsTests {
    @Test(arguments: [
        Double.nan, .infinity, -.infinity, -1, -0.001, 1e16, Seconds.maximum.nextUp, .greatestFiniteMagnitude
    ])
    func valuesThatAreNoTimeoutAreRefused(_ value: Double) {
        guard case .failure(let why) = Seconds.duration(value) else {
            Issue.record("\(value) was taken as a timeout")
            return
        }
        #expect(!why.description.isEmpty)
    }

    @Test func timeoutsWithinTheBoundAreExact() throws {
        #expect(try Seconds.duration(0).get() == .zero)
        #expect(try Seconds.duration(2.5).get() == .milliseconds(2500))
        #expect(try Seconds.duration(Seconds.maximum).get() == .seconds(1_000_000_000))
    }
}
