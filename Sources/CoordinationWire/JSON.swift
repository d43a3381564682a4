import Foundation

/// A JSON value as the wire's readers give it to the decoder: straight from the bytes
/// (`JSONReader`), or converted from what `JSONSerialization` returns (the general reading).
///
/// Typed, not a dictionary of `Any`: there every number and flag is an `NSNumber` to make and
/// cast back, too dear on every hold a client takes. The accessors answer as those casts
/// would, so both readings decode a line alike (a test holds them to each other).
enum JSON: Equatable {
    case null
    case bool(Bool)
    /// Any number: whole ones below 9e15 are exact in a double, and are all the wire uses.
    case number(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    /// What `JSONSerialization` gave, or nil for something it never gives.
    init?(foundation value: Any) {
        switch value {
        case is NSNull: self = .null
        case let number as NSNumber:
            // Foundation parses true and false as the NSNumbers whose objCType is "c".
            if String(cString: number.objCType) == "c" {
                self = .bool(number.boolValue)
            } else {
                self = .number(number.doubleValue)
            }
        case let text as String: self = .string(text)
        case let values as [Any]:
            guard let converted = values.mappedUnlessNil(JSON.init(foundation:)) else { return nil }
            self = .array(converted)
        case let fields as [String: Any]:
            guard let converted = fields.valuesMappedUnlessNil(JSON.init(foundation:)) else { return nil }
            self = .object(converted)
        default: return nil
        }
    }

    var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    var bool: Bool? {
        if case .bool(let flag) = self { return flag }
        return nil
    }

    /// A whole number below 9e15, given with or without a fraction or an exponent ("3.0", "1e2").
    var int: Int? {
        guard case .number(let number) = self, number.isFinite, number == number.rounded(), abs(number) < 9.0e15 else {
            return nil
        }
        return Int(number)
    }

    var double: Double? {
        guard case .number(let number) = self, number.isFinite else { return nil }
        return number
    }

    /// An array of strings only (an empty one too).
    var strings: [String]? {
        guard case .array(let values) = self else { return nil }
        return values.mappedUnlessNil(\.string)
    }

    /// An array of objects only (an empty one too).
    var objects: [[String: JSON]]? {
        guard case .array(let values) = self else { return nil }
        return values.mappedUnlessNil { value in
            if case .object(let fields) = value { fields } else { nil }
        }
    }
}

extension WireValue {
    /// A reply's field: flags, whole numbers, strings, and arrays and objects of them.
    init?(json: JSON) {
        switch json {
        case .bool(let flag): self = .bool(flag)
        case .string(let text): self = .string(text)
        case .number:
            guard let number = json.int else { return nil }
            self = .int(number)
        case .array(let values):
            guard let converted = values.mappedUnlessNil(WireValue.init(json:)) else { return nil }
            self = .array(converted)
        case .object(let fields):
            guard let converted = fields.valuesMappedUnlessNil(WireValue.init(json:)) else { return nil }
            self = .object(converted)
        case .null: return nil
        }
    }
}

extension Array {
    /// Every element transformed, or nil when any one cannot be.
    func mappedUnlessNil<T>(_ transform: (Element) -> T?) -> [T]? {
        var mapped: [T] = []
        mapped.reserveCapacity(count)
        for element in self {
            guard let value = transform(element) else { return nil }
            mapped.append(value)
        }
        return mapped
    }
}

extension Dictionary {
    /// Every value transformed, or nil when any one cannot be.
    func valuesMappedUnlessNil<T>(_ transform: (Value) -> T?) -> [Key: T]? {
        var mapped: [Key: T] = [:]
        mapped.reserveCapacity(count)
        for (key, value) in self {
            guard let converted = transform(value) else { return nil }
            mapped[key] = converted
        }
        return mapped
    }
}
