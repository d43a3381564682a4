/// A watcher's answer to a request, read without building a dictionary of `NSNumber`s: the
/// line every request a watcher takes brings back, which a mount reads while the access waits.
///
/// Strict where JSON is, and narrower, as `EventLine`: the flat object `{"op":"answer",
/// "cookie":N,"errno":N or "NAME"}`, keys in any order, blanks between tokens allowed. A key
/// given twice or any other key, a fraction or an exponent, an errno past what the general
/// reading takes, an unknown errno name, a missing cookie — anything it is not sure of — gives
/// nil, and the line goes the general way, which answers it as before (a test holds the two
/// to each other).
enum AnswerLine {
    static func parse(_ line: some Collection<UInt8>) -> ClientMessage? {
        JSONTokens.reading(line, parse(bytes:))
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> ClientMessage? {
        var reader = JSONTokens(bytes: bytes)
        var isAnswer = false, cookie: Int?, code: Int32?
        guard reader.take(UInt8(ascii: "{")), !reader.take(UInt8(ascii: "}")) else { return nil }
        repeat {
            guard let key = reader.string(), reader.take(UInt8(ascii: ":")) else { return nil }
            switch key {
            case "op":
                guard !isAnswer, reader.string() == "answer" else { return nil }
                isAnswer = true
            case "cookie":
                guard cookie == nil, let value = reader.integer(), value >= 0 else { return nil }
                cookie = value
            case "errno":
                guard code == nil else { return nil }
                let start = reader.index
                if let value = reader.integer() {
                    guard value >= 0, value < 4096 else { return nil }
                    code = Int32(value)
                } else {
                    // Not a number: read again from where it began (`integer` may have taken a sign).
                    reader.index = start
                    guard let name = reader.string(), let known = ErrnoNames.code(of: name) else { return nil }
                    code = known
                }
            default: return nil
            }
        } while reader.take(UInt8(ascii: ","))
        guard reader.take(UInt8(ascii: "}")), reader.atEnd, isAnswer, let cookie else { return nil }
        return .answer(cookie: UInt64(cookie), errno: code ?? 0)
    }
}
