import CoordinationWire
import TestSupport

/// `line` with a few bytes flipped, dropped or repeated, or (given `pieces`) a piece put in:
/// what the codec's fuzz tests feed it.
func mangled(
    _ line: [UInt8], pieces: [[UInt8]] = [], times: ClosedRange<Int> = 1...3,
    using generator: inout SeededGenerator
) -> [UInt8] {
    var bytes = line
    for _ in 0..<Int.random(in: times, using: &generator) where !bytes.isEmpty {
        let index = Int.random(in: 0..<bytes.count, using: &generator)
        switch Int.random(in: 0..<(pieces.isEmpty ? 3 : 4), using: &generator) {
        case 0: bytes[index] = UInt8.random(in: 0...255, using: &generator)
        case 1: bytes.remove(at: index)
        case 2: bytes.insert(bytes[index], at: index)
        default: bytes.insert(contentsOf: pieces.randomElement(using: &generator)!, at: index)
        }
    }
    return bytes
}

/// A name of up to 12 characters with every escape JSON has, multi-byte UTF-8 and an astral
/// character: what event lines carry in the codec's tests.
func randomEventName(using generator: inout SeededGenerator) -> String {
    let alphabet = Array("ab/ Zé€😀\"\\\n\t\u{1}\u{1f}\u{7f}\u{0}".unicodeScalars)
    return String(
        String.UnicodeScalarView(
            (0..<Int.random(in: 0...12, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }))
}

/// An origin as events carry it, or nil (a third of the time), with any of its fields left out.
func randomOrigin(using generator: inout SeededGenerator) -> EventOrigin? {
    let draw = Int.random(in: 0..<3, using: &generator)
    if draw == 0 { return nil }
    let via = ["mount", "coordinator", "outside", "cluster"][Int.random(in: 0..<4, using: &generator)]
    func maybe<T>(_ make: () -> T) -> T? { Bool.random(using: &generator) ? make() : nil }
    return EventOrigin(
        via: via, pid: maybe { Int.random(in: 1...4_194_304, using: &generator) },
        uid: maybe { Int.random(in: 0...65_534, using: &generator) },
        gid: maybe { Int.random(in: 0...65_534, using: &generator) },
        command: maybe { randomEventName(using: &generator) }, purpose: maybe { randomEventName(using: &generator) },
        host: via == "cluster" ? maybe { randomEventName(using: &generator) } : nil)
}
