/// An event line read without `JSONSerialization`, which is too slow for every event: the flat
/// object the server writes (`JSONOutput`), keys in any order, blanks between tokens allowed.
///
/// Strict where JSON is, and narrower: any key but the event's own, a fraction, an exponent, a
/// nested object, a number past what `JSON.int` takes, invalid UTF-8 — anything it is not
/// sure of — gives nil, and the line goes to `JSONSerialization`. So whatever it
/// returns is what the general path returns for the line (a test holds the two to each other).
enum EventLine {
    static func parse(_ line: some Collection<UInt8>) -> EventRecord? {
        JSONTokens.reading(line, parse(bytes:))
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> EventRecord? {
        var reader = JSONTokens(bytes: bytes)
        var wd: Int?, mask: Int?, cookie = 0, name = "", path = ""
        var via: String?, pid: Int?, uid: Int?, gid: Int?, command: String?, purpose: String?, host: String?
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
                case "via": guard let value = reader.string() else { return nil }; via = value
                case "pid": guard let value = reader.integer() else { return nil }; pid = value
                case "uid": guard let value = reader.integer() else { return nil }; uid = value
                case "gid": guard let value = reader.integer() else { return nil }; gid = value
                case "command": guard let value = reader.string() else { return nil }; command = value
                case "purpose": guard let value = reader.string() else { return nil }; purpose = value
                case "host": guard let value = reader.string() else { return nil }; host = value
                default: return nil
                }
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")) else { return nil }
        }
        guard reader.atEnd, let wd, let mask, mask >= 0, mask <= Int(UInt32.max) else { return nil }
        let origin = via.map {
            EventOrigin(via: $0, pid: pid, uid: uid, gid: gid, command: command, purpose: purpose, host: host)
        }
        return EventRecord(
            wd: wd, mask: EventMask(rawValue: UInt32(mask)), cookie: UInt64(cookie), name: name, path: path,
            origin: origin)
    }
}
