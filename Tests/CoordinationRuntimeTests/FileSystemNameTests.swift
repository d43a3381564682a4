@testable import CoordinationRuntime
import TestSupport
import Testing

/// Names are bytes: every byte string a name can be comes back from its string unchanged, and
/// a UTF-8 name is its own string.
@Suite struct FileSystemNameTests {
    @Test func aUTF8NameIsItsOwnString() {
        for name in ["doc.txt", "café", "日本語", "😀 x", ""] {
            #expect(FileSystemName.string(Array(name.utf8)) == name)
            #expect(FileSystemName.bytes(name) == Array(name.utf8))
        }
    }

    @Test func aLatin1NameKeepsItsByte() {
        let bytes: [UInt8] = [0x63, 0x61, 0x66, 0xE9]  // "caf\xe9"
        let text = FileSystemName.string(bytes)
        #expect(text != "caf\u{FFFD}" && text.unicodeScalars.last.map(FileSystemName.isEscape) == true)
        #expect(FileSystemName.bytes(text) == bytes)
        #expect(
            FileSystemName.withCString(text) { pointer in (0..<5).map { UInt8(bitPattern: pointer[$0]) } } == bytes + [
                0
            ])
    }

    @Test func aNameHoldingAnEscapeCharacterAsUTF8StaysDistinct() {
        // U+F7E9 written as UTF-8 must not become the one byte 0xE9.
        let literal = Array("caf\u{F7E9}".utf8)
        let text = FileSystemName.string(literal)
        #expect(FileSystemName.bytes(text) == literal)
        #expect(text != FileSystemName.string([0x63, 0x61, 0x66, 0xE9]))
    }

    @Test func everyByteStringComesBack() {
        var generator = SeededGenerator(seed: 0xF11E_5A3E)
        // Bytes weighted toward the ones that make and break UTF-8 sequences.
        let interesting: [UInt8] = [
            0x61, 0x2F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0x9E, 0x9F, 0xF0, 0xF4, 0xF5, 0xFF
        ]
        var source: [String: [UInt8]] = [:]
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 1...8, using: &generator)).map { _ in
                Bool.random(using: &generator)
                    ? interesting.randomElement(using: &generator)! : UInt8.random(in: 1...255, using: &generator)
            }
            let text = FileSystemName.string(bytes)
            #expect(FileSystemName.bytes(text) == bytes, "\(bytes)")
            // One to one: two byte strings never share a string.
            if let earlier = source.updateValue(bytes, forKey: text) { #expect(earlier == bytes) }
        }
    }
}
