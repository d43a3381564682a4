@testable import CoordinationWire
import Foundation
import TestSupport
import Testing

/// `EventLine`, the quick reading of event lines, against the general one (`JSONSerialization`):
/// whatever it reads is what the general reading gives, and it reads every line the server writes.
@Suite struct EventLineTests {
    private static func general(_ line: [UInt8]) -> ServerMessage? { try? WireCodec.decodeServerInGeneral(line) }

    /// Names with every escape, multi-byte UTF-8 and astral characters, any mask and cookie.
    @Test func everyEventTheServerWritesIsReadQuicklyAndAlike() {
        var generator = SeededGenerator(seed: 0xE7E_17)
        for _ in 0..<3000 {
            let name = randomEventName(using: &generator)
            let record = EventRecord(
                wd: Int.random(in: -5...1_000_000, using: &generator),
                mask: EventMask(rawValue: UInt32.random(in: 0...UInt32.max, using: &generator)),
                cookie: UInt64.random(in: 0...1_000_000, using: &generator), name: name, path: "/m/" + name,
                origin: randomOrigin(using: &generator))
            let line = Array(WireCodec.encode(.event(record)).dropLast())
            #expect(EventLine.parse(line) == record)
            #expect(Self.general(line) == .event(record))
        }
    }

    /// Event lines with bytes flipped, dropped, repeated, or blanks and escapes put in: where the
    /// quick reading gives a record, the general one gives the same.
    @Test func whatItReadsOfMangledLinesTheGeneralReadingReadsAlike() {
        var generator = SeededGenerator(seed: 0xBAD_11E)
        let base = Array(
            WireCodec.encode(
                .event(EventRecord(wd: 3, mask: [.save, .request], cookie: 12, name: "a\"b", path: "/m/a\"b"))
            ).dropLast())
        let insertions: [[UInt8]] = [
            [0x20], [0x0A], Array("\\u00e9".utf8), Array("\\/".utf8), Array("0".utf8), Array(".5".utf8),
            Array("e1".utf8), Array(",\"ok\":true".utf8), Array("\\ud83d".utf8), Array("\\ude00".utf8)
        ]
        var quick = 0
        for _ in 0..<20_000 {
            let bytes = mangled(base, pieces: insertions, using: &generator)
            if let record = EventLine.parse(bytes) {
                quick += 1
                #expect(Self.general(bytes) == .event(record), "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(quick > 1000, "some mangled lines are still events: \(quick)")
    }

    @Test func whatItIsNotSureOfGoesTheGeneralWay() {
        let general: [String] = [
            #"{"wd":1.0,"mask":2}"#, #"{"wd":1e0,"mask":2}"#, #"{"wd":1,"mask":2,"ok":true}"#,
            #"{"wd":1,"mask":2,"other":1}"#,
            #"{"wd":1,"mask":2,"events":"SAVE"}"#, #"{"wd":1,"mask":-1}"#, #"{"wd":1,"mask":4294967296}"#,
            #"{"wd":9000000000000000,"mask":2}"#, #"{"wd":1,"mask":2,"name":"\ud83d"}"#, #"{"wd":1,"mask":2,"name":7}"#,
            #"{"wd":01,"mask":2}"#, #"{"wd":1,"mask":2} x"#, #"{"wd":1,"mask":2,}"#,
            "{\"wd\":1,\"mask\":2,\"name\":\"a\u{1}\"}"
        ]
        for line in general { #expect(EventLine.parse(Array(line.utf8)) == nil, "\(line)") }
        let quick: [(String, EventRecord)] = [
            (
                #" { "wd" : 1 , "mask" : 2 , "cookie" : -4 , "name" : "\ud83d\ude00\u00e9\/" } "#,
                EventRecord(wd: 1, mask: EventMask(rawValue: 2), cookie: 0, name: "😀é/", path: "")
            ),
            (#"{"mask":0,"wd":-0}"#, EventRecord(wd: 0, mask: [], cookie: 0, name: "", path: ""))
        ]
        for (line, record) in quick {
            #expect(EventLine.parse(Array(line.utf8)) == record, "\(line)")
            #expect(Self.general(Array(line.utf8)) == .event(record), "\(line)")
        }
    }
}
