/// A JSON object read without `JSONSerialization`, which is too slow for every line of the
/// control socket: strictly, and narrowly, into typed values (`JSON`). Anything it is not
/// sure of (null, a key given twice, a whole number past what `JSON.int` takes, deep nesting,
/// anything malformed) gives nil, and the line goes to `JSONSerialization`; so what
/// it returns is what `JSON(foundation:)` makes of `JSONSerialization`'s reading (a test holds
/// the two to each other).
enum JSONReader {
    static func object(_ line: some Collection<UInt8>) -> [String: JSON]? {
        JSONTokens.reading(line, object(bytes:))
    }

    private static func object(bytes: UnsafeBufferPointer<UInt8>) -> [String: JSON]? {
        var tokens = JSONTokens(bytes: bytes)
        guard tokens.take(UInt8(ascii: "{")) else { return nil }
        tokens.index -= 1
        guard case .object(let object)? = tokens.value(), tokens.atEnd else { return nil }
        return object
    }
}

/// The tokens of a JSON line, read from its bytes (`JSONReader`, `EventLine`).
struct JSONTokens {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// `read` over the bytes of `line`, in place when they lie in one piece; nil for a line
    /// longer than the protocol allows.
    static func reading<T>(_ line: some Collection<UInt8>, _ read: (UnsafeBufferPointer<UInt8>) -> T?) -> T? {
        guard line.count <= WireProtocol.maximumLineLength else { return nil }
        if let parsed = line.withContiguousStorageIfAvailable(read) { return parsed }
        return Array(line).withUnsafeBufferPointer(read)
    }

    private mutating func skipBlanks() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    var atEnd: Bool { mutating get { skipBlanks(); return index == bytes.count } }

    /// Takes `byte` (after blanks) if it comes next.
    mutating func take(_ byte: UInt8) -> Bool {
        skipBlanks()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// A whole number as `JSON.int` takes it, with no fraction or exponent.
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
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] | 0x20 == UInt8(ascii: "e") {
            return nil
        }
        return negative ? -value : value
    }

    /// Any JSON value, as `JSON(foundation:)` makes what `JSONSerialization` gives. Nil for
    /// null, a key given twice, a whole number past what `JSON.int` takes, nesting past 32
    /// levels, and anything malformed.
    mutating func value(depth: Int = 0) -> JSON? {
        skipBlanks()
        guard index < bytes.count, depth < 32 else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var fields: [String: JSON] = [:]
            if take(UInt8(ascii: "}")) { return .object(fields) }
            repeat {
                guard let key = string(), fields[key] == nil, take(UInt8(ascii: ":")),
                    let field = value(depth: depth + 1)
                else { return nil }
                fields[key] = field
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? .object(fields) : nil
        case UInt8(ascii: "["):
            index += 1
            var elements: [JSON] = []
            if take(UInt8(ascii: "]")) { return .array(elements) }
            repeat {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? .array(elements) : nil
        case UInt8(ascii: "\""):
            return string().map(JSON.string)
        case UInt8(ascii: "t"):
            return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"):
            return literal("false") ? .bool(false) : nil
        default:
            return number().map(JSON.number)
        }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
        index += count
        return true
    }

    /// JSON's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. A whole one as an integer;
    /// one with a fraction or an exponent as a double, but only when it has at most 15 digits
    /// and a power of ten within 10^±22, where every correct reading gives the same double
    /// (`JSONSerialization` rounds longer ones its own way; they go to it).
    private mutating func number() -> Double? {
        let start = index
        func digits() -> Int {
            let first = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                index += 1
            }
            return index - first
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        let integerDigits = digits()
        guard integerDigits > 0, !(integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0")) else { return nil }
        var whole = true, fractionDigits = 0, exponent = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            fractionDigits = digits()
            guard fractionDigits > 0 else { return nil }
            whole = false
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            var sign = 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                if bytes[index] == UInt8(ascii: "-") { sign = -1 }
                index += 1
            }
            let exponentStart = index
            let exponentDigits = digits()
            guard exponentDigits > 0, exponentDigits <= 3 else { return nil }
            for offset in exponentStart..<index { exponent = exponent * 10 + Int(bytes[offset] - UInt8(ascii: "0")) }
            exponent *= sign
            whole = false
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if whole {
            guard integerDigits < 16, let value = Int(text), abs(value) < 9_000_000_000_000_000 else { return nil }
            return Double(value)
        }
        guard integerDigits + fractionDigits <= 15, abs(exponent - fractionDigits) <= 22,
            let value = Double(text), value.isFinite
        else { return nil }
        return value
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
    /// surrogate (but \udc80…\udcff, a byte of a name that is not UTF-8: `JSONOutput.write`)
    /// or invalid UTF-8.
    mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        // Most strings hold no escape: made straight from their bytes.
        var end = index
        while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20
        { end += 1 }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            defer { index = end + 1 }
            return String(validating: UnsafeBufferPointer(rebasing: bytes[index..<end]), as: UTF8.self)
        }
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
                    if (0xDC80...0xDCFF).contains(unit) {
                        scalarValue = JSONOutput.byteEscapeBase + UInt32(unit & 0xFF)
                    } else if (0xD800..<0xDC00).contains(unit) {
                        // A high surrogate must be followed at once by a low one.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { return nil }
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
