@testable import CoordinationWire
import Foundation
import TestSupport
import Testing

/// The hand-written JSON of every line against `JSONEncoder` with sorted keys and unescaped
/// slashes, as the lines were written before: the same bytes for any value the messages can hold.
@Suite struct JSONOutputTests {
    private static let reference: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static func written(_ value: JSONOutput) -> String {
        var bytes: [UInt8] = []
        value.write(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func encoded(_ value: JSONOutput) throws -> String {
        String(decoding: try reference.encode(value), as: UTF8.self)
    }

    @Test func everyCharacterAPathMayHoldIsWrittenAsJSONEncoderWritesIt() throws {
        // Each byte below 0x80 alone, then text with every escape, multi-byte UTF-8 and slashes.
        for byte in UInt8(1)..<0x80 {
            let text = String(decoding: [UInt8(ascii: "a"), byte, UInt8(ascii: "z")], as: UTF8.self)
            #expect(Self.written(.string(text)) == (try Self.encoded(.string(text))), "byte \(byte)")
        }
        let mixed = "/m/dir with space/\"q\"\\\u{0}\u{8}\u{9}\u{a}\u{c}\u{d}\u{1f}\u{7f}é€😀/.."
        #expect(Self.written(.string(mixed)) == (try Self.encoded(.string(mixed))))
    }

    @Test func numbersAndFlagsAreWrittenAsJSONEncoderWritesThem() throws {
        for number in [0, 1, -1, 42, Int.max, Int.min] {
            #expect(Self.written(.int(number)) == (try Self.encoded(.int(number))))
        }
        for number in [0.0, 1.0, 2.5, 0.1, 60, 1e-7, 123_456_789.125, 1e21, -3.75] {
            #expect(Self.written(.double(number)) == (try Self.encoded(.double(number))), "\(number)")
        }
        #expect(Self.written(.bool(true)) == "true" && Self.written(.bool(false)) == "false")
    }

    /// Random trees of objects, arrays and values, seeded: keys sorted by their UTF-8 bytes at
    /// every level, as JSONEncoder sorts them.
    @Test func randomTreesAreWrittenAsJSONEncoderWritesThem() throws {
        var generator = SeededGenerator(seed: 0x150_0701)
        let alphabet = Array("aZ_-/é \"\\\n\u{1}0".unicodeScalars)
        func text() -> String {
            String(
                String.UnicodeScalarView(
                    (0..<Int.random(in: 0...6, using: &generator)).map { _ in
                        alphabet.randomElement(using: &generator)!
                    }))
        }
        func value(depth: Int) -> JSONOutput {
            switch Int.random(in: 0..<(depth < 3 ? 6 : 4), using: &generator) {
            case 0: return .int(Int.random(in: -1_000_000...1_000_000, using: &generator))
            case 1: return .string(text())
            case 2: return .bool(Bool.random(using: &generator))
            case 3: return .double(Double(Int.random(in: -1000...1000, using: &generator)) / 8)
            case 4: return .array((0..<Int.random(in: 0...4, using: &generator)).map { _ in value(depth: depth + 1) })
            default:
                var fields: [String: JSONOutput] = [:]
                for _ in 0..<Int.random(in: 0...5, using: &generator) { fields[text()] = value(depth: depth + 1) }
                return .object(fields)
            }
        }
        for _ in 0..<2000 {
            let tree = value(depth: 0)
            #expect(Self.written(tree) == (try Self.encoded(tree)))
        }
    }

    /// Event lines, written field by field, against the same event as a sorted object: any mask,
    /// cookie and descriptor, names with every escape and multi-byte UTF-8.
    @Test func eventLinesAreWrittenAsEveryOtherLineIs() {
        var generator = SeededGenerator(seed: 0xE7E_0E7)
        for round in 0..<3000 {
            let name = randomEventName(using: &generator)
            let mask =
                round < 32
                ? EventMask(rawValue: 1 << UInt32(round))
                : EventMask(rawValue: UInt32.random(in: 0...UInt32.max, using: &generator))
            let record = EventRecord(
                wd: Int.random(in: -20...1_000_000, using: &generator), mask: mask,
                cookie: UInt64.random(in: 0...UInt64(Int.max), using: &generator), name: name, path: "/m/" + name,
                origin: randomOrigin(using: &generator))
            #expect(WireCodec.eventLine(record) == WireCodec.eventLineInGeneral(record), "\(record)")
        }
    }

    /// Answers, written field by field, against the same answer as a sorted object.
    @Test func answerLinesAreWrittenAsEveryOtherLineIs() {
        var generator = SeededGenerator(seed: 0xA45_0E7)
        for _ in 0..<3000 {
            let cookie = UInt64.random(in: 0...UInt64(Int.max), using: &generator),
                code = Int32.random(in: 0..<4096, using: &generator)
            var general: [UInt8] = []
            JSONOutput.object(["op": "answer", "cookie": .int(Int(cookie)), "errno": .int(Int(code))]).write(
                into: &general)
            #expect(WireCodec.encode(.answer(cookie: cookie, errno: code)) == general + [UInt8(ascii: "\n")])
        }
    }
}
