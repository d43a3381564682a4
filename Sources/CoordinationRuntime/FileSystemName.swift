#if canImport(Glibc)
import Glibc
#endif

/// File names and paths as strings, without losing a byte.
///
/// On Linux a name is any bytes but "/" and NUL; a Swift `String` is Unicode. Decoding a name
/// that is not UTF-8 (a Latin-1 `café` is `caf\xe9`) the usual way replaces the byte with
/// U+FFFD, and a file created through a mount under that name would get another name on disk.
/// Here each byte that is not part of valid UTF-8 becomes the private-use character
/// U+F700 + byte (U+F780…U+F7FF), and back: the same idea as Python's `surrogateescape`, with
/// characters a Swift string can hold. So that the mapping stays one to one, a name that holds
/// one of those characters as valid UTF-8 has each of its bytes escaped too.
///
/// Valid UTF-8 without those characters — nearly every name — is its own string, and both
/// directions then cost one pass over the bytes.
public enum FileSystemName {
    private static let escapeBase: UInt32 = 0xF700

    /// The string for the bytes of a name or a path.
    public static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        // Nearly every name: no 0xEF, so no escape character, and decoded the usual way with
        // nothing repaired (a repair writes U+FFFD, EF BF BD). The check after is a memchr.
        if !contains(0xEF, bytes) {
            var plain = String(decoding: bytes, as: UTF8.self)
            if !plain.withUTF8({ contains(0xEF, $0) }) { return plain }
        } else if !mayHoldEscapes(bytes), let plain = String(validating: bytes, as: UTF8.self) {
            return plain
        }
        var scalars = String.UnicodeScalarView()
        var index = 0
        while index < bytes.count {
            if let (scalar, length) = scalar(in: bytes, at: index), !isEscape(scalar) {
                scalars.append(scalar)
                index += length
            } else {
                // A byte that is not (or does not start) valid UTF-8, or one of an escape
                // character's own: it stands for itself.
                scalars.append(Unicode.Scalar(escapeBase + UInt32(bytes[index]))!)
                index += 1
            }
        }
        return String(scalars)
    }

    /// The scalar whose well-formed UTF-8 starts at `index`, and its length.
    private static func scalar(in bytes: UnsafeBufferPointer<UInt8>, at index: Int) -> (Unicode.Scalar, Int)? {
        let lead = bytes[index]
        let length: Int, minimum: UInt32
        var value: UInt32
        switch lead {
        case 0x00...0x7F: return (Unicode.Scalar(lead), 1)
        case 0xC2...0xDF: length = 2; minimum = 0x80; value = UInt32(lead & 0x1F)
        case 0xE0...0xEF: length = 3; minimum = 0x800; value = UInt32(lead & 0x0F)
        case 0xF0...0xF4: length = 4; minimum = 0x10000; value = UInt32(lead & 0x07)
        default: return nil
        }
        guard index + length <= bytes.count else { return nil }
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard byte & 0xC0 == 0x80 else { return nil }
            value = value << 6 | UInt32(byte & 0x3F)
        }
        // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
        guard value >= minimum, let scalar = Unicode.Scalar(value) else { return nil }
        return (scalar, length)
    }

    /// The string for a NUL-terminated name, as the kernel and libc hand them over.
    public static func string(cString: UnsafePointer<CChar>) -> String {
        let count = strlen(cString)
        return cString.withMemoryRebound(to: UInt8.self, capacity: count) {
            string(UnsafeBufferPointer(start: $0, count: count))
        }
    }

    public static func string(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBufferPointer { string($0) }
    }

    /// The bytes `string(_:)` made `text` from.
    public static func bytes(_ text: String) -> [UInt8] {
        guard mayHoldEscapes(text) else { return Array(text.utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            if isEscape(scalar) {
                bytes.append(UInt8(truncatingIfNeeded: scalar.value - escapeBase))
            } else {
                bytes.append(contentsOf: UTF8.encode(scalar)!)
            }
        }
        return bytes
    }

    /// Calls `body` with `text` as the NUL-terminated bytes a system call takes.
    public static func withCString<Result>(
        _ text: String, _ body: (UnsafePointer<CChar>) throws -> Result
    ) rethrows -> Result {
        guard mayHoldEscapes(text) else { return try text.withCString(body) }
        return try withCString(bytes(text), body)
    }

    /// Calls `body` with `bytes`, a name's or a path's, NUL-terminated.
    public static func withCString<Result>(
        _ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws -> Result
    ) rethrows -> Result {
        try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    /// Whether `scalar` stands for a byte.
    public static func isEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value >= escapeBase + 0x80 && scalar.value <= escapeBase + 0xFF
    }

    /// False when `text` surely holds no escape: U+F780…U+F7FF are EF 9E xx and EF 9F xx.
    private static func mayHoldEscapes(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { mayHoldEscapes($0) }
    }

    private static func contains(_ byte: UInt8, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let start = bytes.baseAddress, !bytes.isEmpty else { return false }
        return memchr(start, Int32(byte), bytes.count) != nil
    }

    /// (memchr: this runs on every name a mount is asked about, and an 0xEF is rare.)
    private static func mayHoldEscapes(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard var start = bytes.baseAddress, bytes.count >= 2 else { return false }
        let end = start + bytes.count
        while let found = memchr(start, 0xEF, end - start)?.assumingMemoryBound(to: UInt8.self) {
            guard found + 1 < end else { return false }
            if found[1] == 0x9E || found[1] == 0x9F { return true }
            start = UnsafePointer(found + 1)
        }
        return false
    }
}
