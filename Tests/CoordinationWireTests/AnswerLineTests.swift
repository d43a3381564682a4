@testable import CoordinationWire
import Foundation
import TestSupport
import Testing

/// `AnswerLine`, the quick reading of a watcher's answers, against the general one
/// (`JSONSerialization`): whatever it reads is what the general reading gives, and it reads
/// every answer a client writes.
@Suite struct AnswerLineTests {
    private static func general(_ line: [UInt8]) -> ClientMessage? { try? WireCodec.decodeClientInGeneral(line) }

    @Test func everyAnswerAClientWritesIsReadQuicklyAndAlike() {
        var generator = SeededGenerator(seed: 0xA45_3E4)
        for _ in 0..<3000 {
            let message = ClientMessage.answer(
                cookie: UInt64.random(in: 0...9_000_000_000_000, using: &generator),
                errno: Int32.random(in: 0..<4096, using: &generator))
            let line = Array(WireCodec.encode(message).dropLast())
            #expect(AnswerLine.parse(line) == message)
            #expect(Self.general(line) == message)
        }
        for (name, code) in ErrnoNames.table {
            let line = Array(#"{"op":"answer","errno":"\#(name)","cookie":5}"#.utf8)
            #expect(AnswerLine.parse(line) == .answer(cookie: 5, errno: code), "\(name)")
            #expect(Self.general(line) == .answer(cookie: 5, errno: code), "\(name)")
        }
    }

    /// Answers with bytes flipped, dropped, repeated, or blanks, escapes and other tokens put in:
    /// where the quick reading gives a message, the general one gives the same.
    @Test func whatItReadsOfMangledLinesTheGeneralReadingReadsAlike() {
        var generator = SeededGenerator(seed: 0xA45_BAD)
        let bases = [
            #"{"cookie":12,"errno":13,"op":"answer"}"#, #"{"op":"answer","cookie":7,"errno":"EACCES"}"#,
            #"{"op":"answer","cookie":3}"#
        ].map { Array($0.utf8) }
        let insertions: [[UInt8]] = [
            [0x20], [0x0A], Array("\\u0061".utf8), Array("0".utf8), Array(".5".utf8), Array("e1".utf8),
            Array("-".utf8), Array(",\"id\":1".utf8), Array(",\"errno\":0".utf8), Array("null".utf8)
        ]
        var quick = 0
        for round in 0..<20_000 {
            let bytes = mangled(bases[round % bases.count], pieces: insertions, times: 1...2, using: &generator)
            if let message = AnswerLine.parse(bytes) {
                quick += 1
                #expect(Self.general(bytes) == message, "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(quick > 400, "some mangled lines are still answers: \(quick)")
    }

    @Test func whatItIsNotSureOfGoesTheGeneralWay() {
        let general: [String] = [
            #"{"op":"answer","cookie":1.0}"#, #"{"op":"answer","cookie":1e0}"#, #"{"op":"answer","cookie":-1}"#,
            #"{"op":"answer","cookie":1,"errno":4096}"#, #"{"op":"answer","cookie":1,"errno":-2}"#,
            #"{"op":"answer","cookie":1,"errno":"EWHAT"}"#, #"{"op":"answer","cookie":1,"errno":null}"#,
            #"{"op":"answer","cookie":1,"cookie":2}"#, #"{"op":"answer","op":"answer","cookie":1}"#,
            #"{"op":"answer","cookie":1,"id":3}"#, #"{"op":"release","cookie":1}"#, #"{"op":"answer"}"#,
            #"{"op":"answer","cookie":9000000000000000}"#, #"{"op":"answer","cookie":01}"#,
            #"{"op":"answer","cookie":1} x"#,
            #"{"op":"answer","cookie":1,}"#, #"{}"#, #"{"op":"\u0061nswer","cookie":1"#
        ]
        for line in general { #expect(AnswerLine.parse(Array(line.utf8)) == nil, "\(line)") }
        let quick: [(String, ClientMessage)] = [
            (#" { "cookie" : 4 , "op" : "\u0061nswer" , "errno" : "ENOENT" } "#, .answer(cookie: 4, errno: 2)),
            (#"{"errno":0,"cookie":-0,"op":"answer"}"#, .answer(cookie: 0, errno: 0))
        ]
        for (line, message) in quick {
            #expect(AnswerLine.parse(Array(line.utf8)) == message, "\(line)")
            #expect(Self.general(Array(line.utf8)) == message, "\(line)")
        }
    }
}
