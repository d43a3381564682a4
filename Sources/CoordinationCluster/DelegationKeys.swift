/// How the delegation keys of one of a store's key spaces (`Delegations.KeySpace`) are named
/// and read. Each delegation is one key `<prefix><path>\0<host>\0<lease>\0<mode>` whose value is
/// its mode, its request and any answer (`Entry.value`).
///
/// With the store's names hidden (`HiddenNames`), the key has the path's hidden name in the
/// path's place, and the value is sealed for the key: the path, a zero byte, then `Entry.value`.
/// The names keep the paths' slashes, so the keys around a path are read as they are in clear.
struct DelegationKeys: Sendable {
    typealias Entry = Delegations.Entry

    /// `/coordfs/<store>/<space>/`: every key of the space, and nothing else, begins with it.
    let prefix: [UInt8]
    /// Nil: the paths are in clear.
    let names: HiddenNames?

    init(store: String, space: Delegations.KeySpace, names: HiddenNames? = nil) {
        prefix = Array("/coordfs/\(store)/\(space.rawValue)/".utf8)
        self.names = names
    }

    /// `path` as the keys name it.
    func name(of path: String) -> String { names?.name(of: path) ?? path }

    /// The key of `entry`, of whichever host.
    func key(of entry: Entry) -> [UInt8] {
        prefix + Array(name(of: entry.path).utf8) + [0] + Array(entry.host.utf8) + [0]
            + Array(String(entry.lease, radix: 16).utf8) + [0]
            + Array(entry.mode.rawValue.utf8)
    }

    /// The value of `entry`'s key `key`: `Entry.value`, or, with hidden names, the path and it
    /// sealed for the key.
    func value(of entry: Entry, at key: [UInt8]) -> [UInt8] {
        guard let names else { return entry.value }
        return names.seal(Array(entry.path.utf8) + [0] + entry.value, for: key)
    }

    /// The delegation a key stands for; nil for a key of another form, or, with hidden names,
    /// one whose value this host's secret does not open.
    func entry(_ value: EtcdKeyValue) -> Entry? {
        guard value.key.starts(with: prefix) else { return nil }
        let rest = value.key[prefix.count...]
        guard let zero = rest.firstIndex(of: 0) else { return nil }
        var path = String(decoding: rest[..<zero], as: UTF8.self)
        var content = value.value
        if let names {
            // The key has the path's hidden name: the path is the sealed value's, before its text.
            guard let opened = names.unseal(value.value, for: value.key), let end = opened.firstIndex(of: 0) else {
                return nil
            }
            path = String(decoding: opened[..<end], as: UTF8.self)
            content = Array(opened[(end + 1)...])
        }
        // `<mode><marker>[|<request>][=<answer>]` (`Entry.value`).
        let text = String(decoding: content, as: UTF8.self)
        let answered = text.firstIndex(of: "=")
        let head = text[..<(answered ?? text.endIndex)]
        let bar = head.firstIndex(of: "|")
        var asked = head[..<(bar ?? head.endIndex)]
        let tentative = asked.last == "?", idle = asked.last == "!"
        if tentative || idle { asked = asked.dropLast() }
        guard let mode = Delegations.Mode(rawValue: String(asked)) else { return nil }
        var answer: Delegations.Answer?
        if let answered {
            guard let known = Delegations.Answer(text: text[text.index(after: answered)...]) else { return nil }
            answer = known
        }
        let holder = rest[(zero + 1)...]
        let host = holder.firstIndex(of: 0).map { holder[..<$0] } ?? holder
        return Entry(
            path: path, host: String(decoding: host, as: UTF8.self),
            mode: mode, revision: value.createRevision, lease: value.lease, isTentative: tentative, asksIdle: idle,
            request: bar.map { String(head[head.index(after: $0)...]) } ?? "", answer: answer)
    }

    /// Reads of the keys that can conflict with one of `path`: its own, those of the items it
    /// holds, and those of the directories that hold it. (A hidden name's directories are the
    /// names of the path's.)
    func neighbourhood(of path: String) -> [EtcdOperation] {
        if path.isEmpty { return [.range(key: prefix, prefix: true)] }
        let named = name(of: path)
        var reads: [EtcdOperation] = [
            .range(key: prefix + Array(named.utf8) + [0], prefix: true),
            .range(key: prefix + Array((named + "/").utf8), prefix: true)
        ]
        var directory = Substring(named)
        while true {
            if let slash = directory.lastIndex(of: "/") { directory = directory[..<slash] } else { directory = "" }
            reads.append(.range(key: prefix + Array(directory.utf8) + [0], prefix: true))
            if directory.isEmpty { break }
        }
        return reads
    }
}
