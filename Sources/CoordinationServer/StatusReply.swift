import CoordinationWire

/// A `status` reply any client can read, however much a shared mount holds: at most
/// `WireProtocol.maximumReplyLength` bytes. Past that the longest list is halved until the
/// line fits, and `omitted` says how many entries of each list were left out. (Sent whole, the
/// line of a mount with a few hundred holds passed what clients read and was dropped: the
/// client waited for its reply for ever.)
enum StatusReply {
    static let lists = ["holders", "waiters", "presenters", "services"]

    static func line(id: Int, fields: [String: WireValue], limit: Int = WireProtocol.maximumReplyLength) -> [UInt8] {
        var fields = fields
        var omitted: [String: Int] = [:]
        while true {
            if !omitted.isEmpty { fields["omitted"] = .object(omitted.mapValues { .int($0) }) }
            let line = WireCodec.encode(ServerMessage.ok(id: id, fields: fields))
            let longest = lists.compactMap { name -> (name: String, entries: [WireValue])? in
                guard case .array(let entries)? = fields[name], !entries.isEmpty else { return nil }
                return (name, entries)
            }.max { $0.entries.count < $1.entries.count }
            // Nothing left to leave out: the line goes as it is, and the client says why it cannot read it.
            guard line.count > limit, let longest else { return line }
            let kept = longest.entries.count / 2
            fields[longest.name] = .array(Array(longest.entries.prefix(kept)))
            omitted[longest.name, default: 0] += longest.entries.count - kept
        }
    }
}
