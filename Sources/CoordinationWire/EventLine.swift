/// An event line read without `JSONSerialization`, which took three quarters of what
/// `coordfs watch` spent on an event: the flat object the server writes (`JSONOutput`), keys in
/// any order, blanks between tokens allowed.
///
/// Strict where JSON is, and narrower: any key but the event's own, a fraction, an exponent, a
/// nested object, a number past what `JSONValue.int` takes, invalid UTF-8 — anything it is not
/// sure of — gives nil, and the line goes to `JSONSerialization` as before. So whatever it
/// returns is what the general path returns for the line (a test holds the two to each other).
enum EventLine {
    static func parse(_ line: some Collection<UInt8>) -> EventRecord? {
        guard line.count <= WireProtocol.maximumLineLength else { return nil }
        if let parsed = line.withContiguousStorageIfAvailable({ parse(bytes: $0) }) { return parsed }
        return Array(line).withUnsafeBufferPointer { parse(bytes: $0) }
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> EventRecord? {
        var reader = Reader(bytes: bytes)
        var wd: Int?, mask: Int?, cookie = 0, name = "", path = ""
        guard reader.take(UInt8(ascii: "{")) else { return nil }
        if !reader.take(UInt8(ascii: "}")) {
            repeat {
                guard let key = reader.string(), reader.take(UInt8(ascii: ":")) else { return nil }
                switch key {
                case "wd": guard let value = reader.integer() else { return nil }; wd = value
                case "mask": guard let value = reader.integer() else { return nil }; mask = value
                case "cookie": guard let value = reader.integer() else { return nil }; cookie = max(0, value)
                case "name": guard let value = reader.string() else { return nil }; name = value
                case "path": guard let value = reader.string() else { return nil }; path = value
                case "events": guard reader.strings() else { return nil }
                default: return nil
                }
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")) else { return nil }
        }
        guard reader.atEnd, let wd, let mask, mask >= 0, mask <= Int(UInt32.max) else { return nil }
        return EventRecord(wd: wd, mask: EventMask(rawValue: UInt32(mask)), cookie: UInt64(cookie), name: name, path: path)
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        private mutating func skipBlanks() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        var atEnd: Bool { mutating get { skipBlanks(); return index == bytes.count } }

        /// Takes `byte` (after blanks) if it comes next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipBlanks()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// A whole number as `JSONValue.int` takes it: no fraction or exponent, under 9e15.
        mutating func integer() -> Int? {
            skipBlanks()
            let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            let start = index
            var value = 0
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                index += 1
                guard value < 9_000_000_000_000_000 else { return nil }
            }
            let digits = index - start
            // JSON allows no leading zero; a fraction or an exponent goes the general way.
            guard digits > 0, !(digits > 1 && bytes[start] == UInt8(ascii: "0")) else { return nil }
            if index < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index]) { return nil }
            return negative ? -value : value
        }

        /// An array of strings, read and dropped (the mask says the same).
        mutating func strings() -> Bool {
            guard take(UInt8(ascii: "[")) else { return false }
            if take(UInt8(ascii: "]")) { return true }
            repeat {
                guard string() != nil else { return false }
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]"))
        }

        /// A string with JSON's escapes; nil on a raw control character, a bad escape, a lone
        /// surrogate or invalid UTF-8.
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            var text: [UInt8] = []
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: text, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escape)
                    case UInt8(ascii: "b"): text.append(0x08)
                    case UInt8(ascii: "f"): text.append(0x0C)
                    case UInt8(ascii: "n"): text.append(0x0A)
                    case UInt8(ascii: "r"): text.append(0x0D)
                    case UInt8(ascii: "t"): text.append(0x09)
                    case UInt8(ascii: "u"):
                        guard let unit = hex4() else { return nil }
                        var scalarValue = UInt32(unit)
                        if (0xD800..<0xDC00).contains(unit) {
                            // A high surrogate must be followed at once by a low one.
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { return nil }
                            index += 2
                            guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                            scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(scalarValue) else { return nil }
                        text.append(contentsOf: String(scalar).utf8)
                    default: return nil
                    }
                case 0x00..<0x20:
                    return nil
                default:
                    text.append(byte)
                }
            }
            return nil
        }

        private mutating func hex4() -> UInt16? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt16(digit)
            }
            return value
        }
    }
}
