@testable import CoordinationWire
import Foundation
import TestSupport
import Testing

/// `JSONReader`, the quick reading of every line, against `JSONSerialization` alone: the same
/// message, or the same error, for every line, well-formed or mangled.
@Suite struct JSONReaderTests {
    private static func outcome<M: Equatable>(_ decode: () throws -> M) -> Result<M, WireError> {
        do { return .success(try decode()) } catch let error as WireError { return .failure(error) } catch {
            return .failure(WireError("not a WireError: \(error)"))
        }
    }

    private static let clientLines: [String] =
        CodecTests.golden.map(\.0) + [
            #"{"op":"hold","id":3,"intents":[{"path":"/m/a","access":"write","options":["forDeleting"]}],"wait":true,"timeout":60,"inherit":false}"#,
            #"{"op":"hold","id":4,"intents":[{"path":"/m/\u00e9 \"q\"","access":"read"}],"timeout":1.5e1}"#,
            #"{"op":"watch","id":5,"path":"/m","mask":1073741828}"#,
            #"{"op":"answer","cookie":7,"errno":"EACCES"}"#,
            #"{"op":"vend","id":6,"name":"org.example.svc","path":"/m/project"}"#
        ]

    private static let serverLines: [String] = [
        #"{"id":2,"ok":true,"holders":[{"pid":12,"path":"\/m\/a","intents":[{"mode":"write","path":"\/m\/a"}],"waits_for":[]}],"root":"\/m"}"#,
        #"{"error":"EACCES","id":4,"message":"no \"way\""}"#,
        #"{"hold":3,"id":5,"ok":true}"#,
        #"{"id":6,"ok":true,"wd":2,"path":"\/m\/doc"}"#
    ]

    @Test func everyLineOfTheProtocolIsReadAlike() throws {
        for line in Self.clientLines {
            let bytes = Array(line.utf8)
            #expect(JSONReader.object(bytes) != nil, "read quickly: \(line)")
            #expect(
                Self.outcome { try WireCodec.decodeClient(bytes) }
                    == Self.outcome { try WireCodec.decodeClientInGeneral(bytes) }, "\(line)")
        }
        for line in Self.serverLines {
            let bytes = Array(line.utf8)
            #expect(JSONReader.object(bytes) != nil, "read quickly: \(line)")
            #expect(
                Self.outcome { try WireCodec.decodeServer(bytes) }
                    == Self.outcome { try WireCodec.decodeServerInGeneral(bytes) }, "\(line)")
        }
    }

    /// Lines with bytes flipped, dropped, repeated, or JSON's pieces put in: whatever the quick
    /// reading makes of one, message or error, the general reading makes the same.
    @Test func mangledLinesAreReadAlike() {
        var generator = SeededGenerator(seed: 0x15_0_1EAD)
        let pieces: [[UInt8]] = [
            " ", "\n", "null", "true", "1.5", "-0", "1e999", "0x1", ",", ":", "{}", "[]", "\"\"",
            "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "\"id\":1,", "9007199254740993"
        ].map { Array($0.utf8) }
        let lines = (Self.clientLines + Self.serverLines).map { Array($0.utf8) }
        var quick = 0
        for round in 0..<20_000 {
            let bytes = mangled(lines[round % lines.count], pieces: pieces, using: &generator)
            if JSONReader.object(bytes) != nil { quick += 1 }
            let client = Self.outcome { try WireCodec.decodeClient(bytes) },
                clientInGeneral = Self.outcome { try WireCodec.decodeClientInGeneral(bytes) }
            #expect(client == clientInGeneral, "\(String(decoding: bytes, as: UTF8.self))")
            let server = Self.outcome { try WireCodec.decodeServer(bytes) },
                serverInGeneral = Self.outcome { try WireCodec.decodeServerInGeneral(bytes) }
            #expect(server == serverInGeneral, "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(quick > 3000, "many mangled lines are still JSON objects: \(quick)")
    }

    @Test func whatItIsNotSureOfGoesToJSONSerialization() {
        for line in [
            #"{"a":null}"#, #"{"a":1,"a":2}"#, #"{"a":9000000000000000}"#, #"{"a":1e999}"#, #"{"a":01}"#,
            #"{"a":"\ud83d"}"#, #"{"a":1,}"#, #"{"a":1} x"#, #"[1]"#, "{\"a\":\"\u{1}\"}", #"{"a":tru}"#
        ] {
            #expect(JSONReader.object(Array(line.utf8)) == nil, "\(line)")
        }
        let nested = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        #expect(JSONReader.object(Array(("{\"a\":" + nested + "}").utf8)) == nil, "nesting past 32 levels")
    }
}
