import Foundation

/// Why a line could not be decoded. The server answers with an error and closes the connection,
/// unless the line was a request it could tell apart (`refusedRequest`): then it refuses that one.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    /// The id of a request whose op the server knows but whose fields are wrong (an unknown
    /// event name, a missing path): the client meant that request, and can be told so alone.
    public let refusedRequest: Int?
    public init(_ description: String, refusedRequest: Int? = nil) {
        self.description = description
        self.refusedRequest = refusedRequest
    }
}

/// Lines to messages and back. Total: every input gives a message or a `WireError`, never a trap.
public enum WireCodec {
    // MARK: Client messages

    /// A whole line as a client sent it.
    public static func decodeClient(_ line: [UInt8]) throws(WireError) -> ClientMessage { try decodeClient(line[...]) }

    /// A line as it lies in a connection's buffer. (Of a concrete type: called generically from
    /// another module, every call would instantiate generic metadata.)
    public static func decodeClient(_ line: ArraySlice<UInt8>) throws(WireError) -> ClientMessage {
        // A watcher's answers come while accesses wait for them: the one line read without
        // a dictionary first.
        if let answer = AnswerLine.parse(line) { return answer }
        return try clientMessage(try parseObject(line, quickly: true))
    }

    /// A client line through `JSONSerialization` alone: what the quick reading is tested against.
    static func decodeClientInGeneral(_ line: some Collection<UInt8>) throws(WireError) -> ClientMessage {
        try clientMessage(try parseObject(line, quickly: false))
    }

    /// The ops that carry an id and may be refused one by one (`hello` must succeed, and an
    /// `answer` or `working` with a wrong cookie is a client's confusion about the whole exchange).
    private static let refusable: Set<String> = [
        "watch", "unwatch", "hold", "release", "moved", "cancel", "status",
        "vend", "withdraw", "services", "connect", "remount", "versions", "version",
        "add_version"
    ]

    private static func clientMessage(_ object: [String: JSON]) throws(WireError) -> ClientMessage {
        do {
            return try request(object)
        } catch {
            guard error.refusedRequest == nil, let op = object["op"]?.string, refusable.contains(op),
                let id = object["id"]?.int
            else { throw error }
            throw WireError(error.description, refusedRequest: id)
        }
    }

    private static func request(_ object: [String: JSON]) throws(WireError) -> ClientMessage {
        guard let op = object["op"]?.string else { throw WireError("missing \"op\"") }
        switch op {
        case "hello":
            return .hello(id: try int(object, "id"), version: try int(object, "version"))
        case "watch":
            var mask = EventMask.all
            if let value = object["mask"] {
                if let names = value.strings {
                    guard let parsed = EventMask(names: names) else {
                        let unknown = names.filter { EventMask(names: [$0]) == nil }.prefix(3).map {
                            "\"\($0.prefix(64))\""
                        }
                        throw WireError("unknown event name \(unknown.joined(separator: ", ")) in \"mask\"")
                    }
                    mask = parsed
                } else if let number = value.int, number >= 0, number <= Int(UInt32.max) {
                    mask = EventMask(rawValue: UInt32(number))
                } else {
                    throw WireError("\"mask\" must be a list of event names or a number")
                }
            }
            return .watch(id: try int(object, "id"), path: try string(object, "path"), mask: mask)
        case "unwatch":
            return .unwatch(id: try int(object, "id"), wd: try int(object, "wd"))
        case "answer":
            let cookie = try int(object, "cookie")
            guard cookie >= 0 else { throw WireError("\"cookie\" must not be negative") }
            var code: Int32 = 0
            if let value = object["errno"] {
                if let number = value.int, number >= 0, number < 4096 {
                    code = Int32(number)
                } else if let name = value.string {
                    guard let known = ErrnoNames.code(of: name) else {
                        throw WireError("unknown errno name \"\(name)\"")
                    }
                    code = known
                } else {
                    throw WireError("\"errno\" must be a number or an errno name")
                }
            }
            return .answer(cookie: UInt64(cookie), errno: code)
        case "working":
            let cookie = try int(object, "cookie")
            guard cookie >= 0 else { throw WireError("\"cookie\" must not be negative") }
            return .working(cookie: UInt64(cookie))
        case "hold":
            guard let list = object["intents"]?.objects, !list.isEmpty else {
                throw WireError("\"intents\" must be a non-empty list")
            }
            guard list.count <= 64 else { throw WireError("at most 64 intents") }
            let intents = try list.map { entry throws(WireError) -> WireIntent in
                guard let access = entry["access"]?.string.flatMap(WireIntent.Access.init(rawValue:)) else {
                    throw WireError("an intent's \"access\" must be \"read\" or \"write\"")
                }
                let options = entry["options"]?.strings
                if entry["options"] != nil && options == nil { throw WireError("\"options\" must be a list of names") }
                return WireIntent(path: try string(entry, "path"), access: access, options: options)
            }
            let timeout = object["timeout"]?.double
            if object["timeout"] != nil && timeout == nil { throw WireError("\"timeout\" must be a number of seconds") }
            if let timeout, case .failure(let why) = Seconds.duration(timeout) {
                throw WireError("\"timeout\": \(why)")
            }
            let presenter = object["presenter"]?.int
            if object["presenter"] != nil && presenter == nil {
                throw WireError("\"presenter\" must be a watch descriptor")
            }
            let coordinator = object["coordinator"]?.string
            if object["coordinator"] != nil
                && (coordinator == nil || coordinator!.isEmpty || coordinator!.utf8.count > 255)
            {
                throw WireError("\"coordinator\" must be a name of 1 to 255 bytes")
            }
            let holder = object["holder"]?.int
            if object["holder"] != nil && (holder == nil || holder! < 2 || holder! > Int(Int32.max)) {
                throw WireError("\"holder\" must be a process id")
            }
            return .hold(
                id: try int(object, "id"), intents: intents, wait: try bool(object, "wait", default: true),
                timeout: timeout, inherit: try bool(object, "inherit", default: false), presenter: presenter,
                coordinator: coordinator, holder: holder)
        case "remount":
            guard let options = object["options"]?.strings, options.count <= 64,
                options.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 4096 })
            else {
                throw WireError("\"options\" must be a list of at most 64 options")
            }
            return .remount(id: try int(object, "id"), options: options)
        case "moved":
            return .moved(
                id: try int(object, "id"), hold: try int(object, "hold"), from: try string(object, "from"),
                to: try string(object, "to"))
        case "release":
            return .release(
                id: try int(object, "id"), hold: try int(object, "hold"),
                changed: try bool(object, "changed", default: true))
        case "cancel":
            return .cancel(id: try int(object, "id"), request: try int(object, "request"))
        case "status":
            return .status(id: try int(object, "id"), page: try StatusPage(object))
        case "vend":
            return .vend(id: try int(object, "id"), name: try string(object, "name"), path: try string(object, "path"))
        case "withdraw":
            return .withdraw(id: try int(object, "id"), service: try int(object, "service"))
        case "services":
            return .services(id: try int(object, "id"), path: try string(object, "path"))
        case "connect":
            return .connect(
                id: try int(object, "id"), name: try string(object, "name"), path: try string(object, "path"))
        case "versions":
            return .versions(id: try int(object, "id"), path: try string(object, "path"))
        case "version":
            let name = try string(object, "action")
            guard let action = VersionAction(rawValue: name) else {
                throw WireError(
                    "\"action\" must be one of \(VersionAction.allCases.map(\.rawValue).joined(separator: ", ")), not '\(name)'"
                )
            }
            return .version(
                id: try int(object, "id"), path: try string(object, "path"), version: try string(object, "version"),
                action: action)
        case "add_version":
            return .addVersion(id: try int(object, "id"), path: try string(object, "path"))
        default:
            throw WireError("unknown op \"\(op)\"")
        }
    }

    public static func encode(_ message: ClientMessage) -> [UInt8] {
        var object: [String: JSONOutput]
        switch message {
        case .answer(let cookie, let code):
            // A watcher writes one for every request it takes, while the access waits.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(48)
            bytes.append(contentsOf: #"{"cookie":"#.utf8)
            JSONOutput.write(Int(cookie), into: &bytes)
            bytes.append(contentsOf: #","errno":"#.utf8)
            JSONOutput.write(Int(code), into: &bytes)
            bytes.append(contentsOf: #","op":"answer"}"#.utf8)
            bytes.append(UInt8(ascii: "\n"))
            return bytes
        case .working(let cookie): object = ["op": "working", "cookie": .int(Int(cookie))]
        case .hello(let id, let version): object = ["op": "hello", "id": .int(id), "version": .int(version)]
        case .watch(let id, let path, let mask):
            object = ["op": "watch", "id": .int(id), "path": .string(path), "mask": .strings(mask.names)]
        case .unwatch(let id, let wd): object = ["op": "unwatch", "id": .int(id), "wd": .int(wd)]
        case .hold(let id, let intents, let wait, let timeout, let inherit, let presenter, let coordinator, let holder):
            object = [
                "op": "hold", "id": .int(id), "wait": .bool(wait), "inherit": .bool(inherit),
                "intents": .array(
                    intents.map { intent -> JSONOutput in
                        var entry: [String: JSONOutput] = [
                            "path": .string(intent.path), "access": .string(intent.access.rawValue)
                        ]
                        if let options = intent.options { entry["options"] = .strings(options) }
                        return .object(entry)
                    })
            ]
            if let timeout { object["timeout"] = .double(timeout) }
            if let presenter { object["presenter"] = .int(presenter) }
            if let coordinator { object["coordinator"] = .string(coordinator) }
            if let holder { object["holder"] = .int(holder) }
        case .remount(let id, let options): object = ["op": "remount", "id": .int(id), "options": .strings(options)]
        case .release(let id, let hold, let changed):
            object = ["op": "release", "id": .int(id), "hold": .int(hold), "changed": .bool(changed)]
        case .moved(let id, let hold, let from, let to):
            object = ["op": "moved", "id": .int(id), "hold": .int(hold), "from": .string(from), "to": .string(to)]
        case .cancel(let id, let request): object = ["op": "cancel", "id": .int(id), "request": .int(request)]
        case .status(let id, let page):
            object = ["op": "status", "id": .int(id)]
            if let list = page.list { object["list"] = .string(list.rawValue) }
            if let after = page.after { object["after"] = .int(after) }
            if let limit = page.limit { object["limit"] = .int(limit) }
        case .vend(let id, let name, let path):
            object = ["op": "vend", "id": .int(id), "name": .string(name), "path": .string(path)]
        case .withdraw(let id, let service): object = ["op": "withdraw", "id": .int(id), "service": .int(service)]
        case .services(let id, let path): object = ["op": "services", "id": .int(id), "path": .string(path)]
        case .connect(let id, let name, let path):
            object = ["op": "connect", "id": .int(id), "name": .string(name), "path": .string(path)]
        case .versions(let id, let path): object = ["op": "versions", "id": .int(id), "path": .string(path)]
        case .version(let id, let path, let version, let action):
            object = [
                "op": "version", "id": .int(id), "path": .string(path), "version": .string(version),
                "action": .string(action.rawValue)
            ]
        case .addVersion(let id, let path): object = ["op": "add_version", "id": .int(id), "path": .string(path)]
        }
        return line(object)
    }

    /// An object as one line of JSON, keys sorted, as the wire writes its lines (what a
    /// command prints for `--json`).
    public static func encode(object fields: [String: WireValue]) -> [UInt8] {
        line(fields.mapValues(JSONOutput.init))
    }

    // MARK: Server messages

    public static func encode(_ message: ServerMessage) -> [UInt8] {
        switch message {
        case .ok(let id, let fields):
            var object = fields.mapValues(JSONOutput.init)
            object["id"] = .int(id)
            object["ok"] = .bool(true)
            return line(object)
        case .error(let id, let code, let text):
            var object: [String: JSONOutput] = ["error": .string(code), "message": .string(text)]
            if let id { object["id"] = .int(id) }
            return line(object)
        case .event(let record):
            return eventLine(record)
        }
    }

    /// An event's line, written field by field in the order `line` sorts its keys into: a
    /// watcher gets one for every new file, too often to build a dictionary and sort it each time.
    static func eventLine(_ record: EventRecord) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(160 + record.name.utf8.count + record.path.utf8.count)
        bytes.append(UInt8(ascii: "{"))
        if let command = record.origin?.command {
            bytes.append(contentsOf: #""command":"#.utf8)
            JSONOutput.write(command, into: &bytes)
            bytes.append(UInt8(ascii: ","))
        }
        bytes.append(contentsOf: #""cookie":"#.utf8)
        JSONOutput.write(Int(record.cookie), into: &bytes)
        bytes.append(contentsOf: #","events":["#.utf8)
        var first = true
        for (name, bit) in EventMask.names where record.mask.contains(bit) {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            JSONOutput.write(name, into: &bytes)
        }
        bytes.append(UInt8(ascii: "]"))
        if let gid = record.origin?.gid {
            bytes.append(contentsOf: #","gid":"#.utf8)
            JSONOutput.write(gid, into: &bytes)
        }
        if let host = record.origin?.host {
            bytes.append(contentsOf: #","host":"#.utf8)
            JSONOutput.write(host, into: &bytes)
        }
        bytes.append(contentsOf: #","mask":"#.utf8)
        JSONOutput.write(Int(record.mask.rawValue), into: &bytes)
        bytes.append(contentsOf: #","name":"#.utf8)
        JSONOutput.write(record.name, into: &bytes)
        bytes.append(contentsOf: #","path":"#.utf8)
        JSONOutput.write(record.path, into: &bytes)
        if let origin = record.origin {
            if let pid = origin.pid {
                bytes.append(contentsOf: #","pid":"#.utf8)
                JSONOutput.write(pid, into: &bytes)
            }
            if let purpose = origin.purpose {
                bytes.append(contentsOf: #","purpose":"#.utf8)
                JSONOutput.write(purpose, into: &bytes)
            }
            if let uid = origin.uid {
                bytes.append(contentsOf: #","uid":"#.utf8)
                JSONOutput.write(uid, into: &bytes)
            }
            bytes.append(contentsOf: #","via":"#.utf8)
            JSONOutput.write(origin.via, into: &bytes)
        }
        bytes.append(contentsOf: #","wd":"#.utf8)
        JSONOutput.write(record.wd, into: &bytes)
        bytes.append(contentsOf: "}\n".utf8)
        return bytes
    }

    /// `eventLine` as every other line is written (its test).
    static func eventLineInGeneral(_ record: EventRecord) -> [UInt8] {
        var object: [String: JSONOutput] = [
            "wd": .int(record.wd), "mask": .int(Int(record.mask.rawValue)),
            "events": .strings(record.mask.names), "cookie": .int(Int(record.cookie)),
            "name": .string(record.name), "path": .string(record.path)
        ]
        if let origin = record.origin {
            object["via"] = .string(origin.via)
            if let pid = origin.pid { object["pid"] = .int(pid) }
            if let uid = origin.uid { object["uid"] = .int(uid) }
            if let gid = origin.gid { object["gid"] = .int(gid) }
            if let command = origin.command { object["command"] = .string(command) }
            if let purpose = origin.purpose { object["purpose"] = .string(purpose) }
            if let host = origin.host { object["host"] = .string(host) }
        }
        return line(object)
    }

    public static func decodeServer(_ line: [UInt8]) throws(WireError) -> ServerMessage { try decodeServer(line[...]) }

    /// A line as it lies in a connection's buffer (concrete, as `decodeClient`).
    public static func decodeServer(_ line: ArraySlice<UInt8>) throws(WireError) -> ServerMessage {
        // Most lines a client reads are events: `EventLine` reads them without JSONSerialization,
        // which is too slow for every event.
        if let record = EventLine.parse(line) { return .event(record) }
        return try serverMessage(try parseObject(line, quickly: true, limit: WireProtocol.maximumReplyLength))
    }

    /// A server line through `JSONSerialization` alone: what the quick readings are tested against.
    static func decodeServerInGeneral(_ line: some Collection<UInt8>) throws(WireError) -> ServerMessage {
        try serverMessage(try parseObject(line, quickly: false, limit: WireProtocol.maximumReplyLength))
    }

    private static func serverMessage(_ object: [String: JSON]) throws(WireError) -> ServerMessage {
        // Replies carry "ok" or "error" (a watch's reply has a "wd" too); events carry neither.
        if object["ok"] == nil && object["error"] == nil, let wd = object["wd"]?.int {
            guard let mask = object["mask"]?.int, mask >= 0, mask <= Int(UInt32.max) else {
                throw WireError("bad \"mask\"")
            }
            let origin = object["via"]?.string.map { via in
                EventOrigin(
                    via: via, pid: object["pid"]?.int, uid: object["uid"]?.int, gid: object["gid"]?.int,
                    command: object["command"]?.string, purpose: object["purpose"]?.string, host: object["host"]?.string
                )
            }
            return .event(
                EventRecord(
                    wd: wd, mask: EventMask(rawValue: UInt32(mask)), cookie: UInt64(max(0, object["cookie"]?.int ?? 0)),
                    name: object["name"]?.string ?? "", path: object["path"]?.string ?? "", origin: origin))
        }
        if let code = object["error"]?.string {
            return .error(id: object["id"]?.int, errno: code, message: object["message"]?.string ?? "")
        }
        guard object["ok"]?.bool == true else { throw WireError("neither an event, an error nor ok") }
        var fields: [String: WireValue] = [:]
        for (key, value) in object where key != "id" && key != "ok" {
            guard let converted = WireValue(json: value) else { throw WireError("unsupported value for \"\(key)\"") }
            fields[key] = converted
        }
        return .ok(id: try int(object, "id"), fields: fields)
    }

    // MARK: Helpers

    /// `quickly`: by `JSONReader` first, which leaves to `JSONSerialization` what it is not sure of.
    private static func parseObject(
        _ line: some Collection<UInt8>, quickly: Bool,
        limit: Int = WireProtocol.maximumLineLength
    ) throws(WireError) -> [String: JSON] {
        guard line.count <= limit else { throw WireError("line longer than \(limit) bytes") }
        guard !line.isEmpty else { throw WireError("empty line") }
        if quickly, let object = JSONReader.object(line) { return object }
        let parsed: Any
        do { parsed = try JSONSerialization.jsonObject(with: Data(line), options: []) } catch {
            throw WireError("not JSON")
        }
        guard parsed is [String: Any], case .object(let object)? = JSON(foundation: parsed) else {
            throw WireError("not a JSON object")
        }
        return object
    }

    private static func int(_ object: [String: JSON], _ key: String) throws(WireError) -> Int {
        guard let value = object[key]?.int else { throw WireError("\"\(key)\" must be a whole number") }
        return value
    }

    private static func bool(_ object: [String: JSON], _ key: String, default fallback: Bool) throws(WireError) -> Bool
    {
        guard let value = object[key] else { return fallback }
        guard let flag = value.bool else { throw WireError("\"\(key)\" must be true or false") }
        return flag
    }

    private static func string(_ object: [String: JSON], _ key: String) throws(WireError) -> String {
        guard let value = object[key]?.string, !value.isEmpty, !value.utf8.contains(0) else {
            throw WireError("\"\(key)\" must be a non-empty string")
        }
        return value
    }

    /// One line: the object, byte for byte as `JSONEncoder` writes it with sorted keys
    /// (`JSONOutput.write`), and a newline.
    private static func line(_ object: [String: JSONOutput]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(128)
        JSONOutput.object(object).write(into: &bytes)
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }
}

/// A JSON value to write: what the messages hold.
///
/// Written by hand: every event a presenter hears is a line, and `JSONEncoder` is too slow for
/// every event. The bytes are the ones `JSONEncoder` writes with sorted keys and unescaped
/// slashes (`Encodable` stays, for the test that holds the two to each other).
enum JSONOutput: Encodable, ExpressibleByStringLiteral {
    case int(Int)
    case double(Double)
    case string(String)
    case bool(Bool)
    case array([JSONOutput])
    case object([String: JSONOutput])

    init(stringLiteral value: String) { self = .string(value) }

    static func strings(_ values: [String]) -> JSONOutput { .array(values.map(JSONOutput.string)) }

    init(_ value: WireValue) {
        switch value {
        case .int(let number): self = .int(number)
        case .string(let text): self = .string(text)
        case .bool(let flag): self = .bool(flag)
        case .array(let values): self = .array(values.map(JSONOutput.init))
        case .object(let fields): self = .object(fields.mapValues(JSONOutput.init))
        }
    }

    func write(into bytes: inout [UInt8]) {
        switch self {
        case .int(let number): Self.write(number, into: &bytes)
        case .double(let number):
            guard number.isFinite else { return bytes.append(contentsOf: "null".utf8) }
            // As JSONEncoder: the shortest form that reads back the same, without a ".0".
            var text = number.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            bytes.append(contentsOf: text.utf8)
        case .string(let text): Self.write(text, into: &bytes)
        case .bool(let flag): bytes.append(contentsOf: (flag ? "true" : "false").utf8)
        case .array(let values):
            bytes.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                value.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let fields):
            bytes.append(UInt8(ascii: "{"))
            for (index, field) in fields.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated()
            {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.write(field.key, into: &bytes)
                bytes.append(UInt8(ascii: ":"))
                field.value.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// A whole number in decimal, as `String(number)` spells it.
    static func write(_ number: Int, into bytes: inout [UInt8]) {
        if number >= 0 && number < 10 { return bytes.append(UInt8(ascii: "0") + UInt8(number)) }
        bytes.append(contentsOf: String(number).utf8)
    }

    /// The private-use characters U+F780…U+F7FF stand for the bytes 0x80…0xFF of a name that
    /// is not UTF-8 (the runtime's `FileSystemName`). On the wire they are the lone
    /// surrogates \udc80…\udcff, as Python's `surrogateescape` spells such bytes: a Python
    /// client's `os.fsencode` of the string is the name's bytes, and its `json.dumps` of a
    /// path from `os.fsdecode` is read back here as the same name.
    static let byteEscapeBase: UInt32 = 0xF700

    /// A string, quoted and escaped as JSONEncoder escapes it `.withoutEscapingSlashes`: quote
    /// and backslash, the five control characters with short escapes, the rest below 0x20 as
    /// \u00xx; UTF-8 as is, but for the escapes of bytes (above). Slashes stay: paths are
    /// most of what lines hold, and `grep` and people read them.
    static func write(_ text: String, into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var index = 0
            while index < utf8.count {
                let byte = utf8[index]
                index += 1
                // U+F780…U+F7FF are EF 9E 80…EF 9F BF: a byte of a name, as \udcXX.
                if byte == 0xEF, index + 1 < utf8.count, utf8[index] & 0xFE == 0x9E {
                    let scalar = 0xF000 | UInt32(utf8[index] & 0x3F) << 6 | UInt32(utf8[index + 1] & 0x3F)
                    let escaped = UInt8(truncatingIfNeeded: scalar - byteEscapeBase)
                    bytes.append(contentsOf: [
                        UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "d"), UInt8(ascii: "c"),
                        hexDigits[Int(escaped >> 4)], hexDigits[Int(escaped & 0x0F)]
                    ])
                    index += 2
                    continue
                }
                write(byte, into: &bytes)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// One byte of a string's UTF-8, escaped where JSON needs it.
    private static func write(_ byte: UInt8, into bytes: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\")); bytes.append(byte)
        case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
        case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
        case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        case 0x00..<0x20:
            bytes.append(contentsOf: [
                UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]
            ])
        default: bytes.append(byte)
        }
    }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .int(let number): try container.encode(number)
        case .double(let number): try container.encode(number)
        case .string(let text): try container.encode(text)
        case .bool(let flag): try container.encode(flag)
        case .array(let values): try container.encode(values)
        case .object(let fields): try container.encode(fields)
        }
    }
}

/// errno names on the wire ("EACCES") and their numbers on Linux: every errno a refusal or
/// a system call may answer a client with. One not named here travels as "E" and its number.
public enum ErrnoNames {
    public static let table: [(String, Int32)] = [
        ("EPERM", 1), ("ENOENT", 2), ("ESRCH", 3), ("EINTR", 4), ("EIO", 5), ("ENXIO", 6), ("E2BIG", 7),
        ("ENOEXEC", 8), ("EBADF", 9), ("ECHILD", 10), ("EAGAIN", 11), ("ENOMEM", 12), ("EACCES", 13),
        ("EFAULT", 14), ("EBUSY", 16), ("EEXIST", 17), ("EXDEV", 18), ("ENODEV", 19), ("ENOTDIR", 20),
        ("EISDIR", 21), ("EINVAL", 22), ("ENFILE", 23), ("EMFILE", 24), ("ETXTBSY", 26), ("EFBIG", 27),
        ("ENOSPC", 28), ("ESPIPE", 29), ("EROFS", 30), ("EMLINK", 31), ("EPIPE", 32), ("ERANGE", 34),
        ("EDEADLK", 35), ("ENAMETOOLONG", 36), ("ENOLCK", 37), ("ENOSYS", 38), ("ENOTEMPTY", 39),
        ("ELOOP", 40), ("ENODATA", 61), ("EPROTO", 71), ("EOVERFLOW", 75), ("EPROTONOSUPPORT", 93),
        ("EOPNOTSUPP", 95), ("ENOTCONN", 107), ("ETIMEDOUT", 110), ("ECONNREFUSED", 111), ("ESTALE", 116),
        ("EDQUOT", 122), ("ECANCELED", 125)
    ]

    public static func code(of name: String) -> Int32? {
        if let named = table.first(where: { $0.0 == name }) { return named.1 }
        // As `name(of:)` spells an errno the table lacks: "E" and its number, digits only.
        let digits = name.utf8.dropFirst()
        guard name.hasPrefix("E"), (1...4).contains(digits.count), digits.allSatisfy({ (0x30...0x39).contains($0) }),
            let number = Int32(String(decoding: digits, as: UTF8.self)), (1..<4096).contains(number)
        else { return nil }
        return number
    }

    public static func name(of code: Int32) -> String { table.first { $0.1 == code }?.0 ?? "E\(code)" }
}
