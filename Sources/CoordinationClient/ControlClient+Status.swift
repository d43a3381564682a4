import CoordinationWire

extension ControlClient {
    /// The server's whole status: its first page, and then each list that goes on (`next`) read
    /// a page at a time and added to it, the way `coordfs status` shows it. A server keeps each
    /// page small; the whole is as large as what it holds, here in the client.
    public func wholeStatus(pageLimit: Int = 10_000) throws -> [String: WireValue] {
        var whole = try request { .status(id: $0) }
        var cursors = Self.cursors(whole["next"])
        whole["next"] = nil
        for list in StatusPage.List.allCases {
            while let cursor = cursors[list] {
                let page = try request {
                    .status(id: $0, page: StatusPage(list: list, after: cursor, limit: pageLimit))
                }
                for name in StatusPage.List.allCases.map(\.rawValue) {
                    guard case .array(let more)? = page[name], !more.isEmpty else { continue }
                    let before: [WireValue] = if case .array(let entries)? = whole[name] { entries } else { [] }
                    whole[name] = .array(before + more)
                }
                if case .object(let omitted)? = page["omitted"] {
                    whole["omitted"] = Self.adding(omitted, to: whole["omitted"])
                }
                // A cursor only goes forward: a server that answered the same again would loop.
                cursors[list] = Self.cursors(page["next"])[list].flatMap { $0 > cursor ? $0 : nil }
            }
        }
        return whole
    }

    private static func cursors(_ next: WireValue?) -> [StatusPage.List: Int] {
        guard case .object(let next)? = next else { return [:] }
        var cursors: [StatusPage.List: Int] = [:]
        for (name, value) in next {
            if let list = StatusPage.List(rawValue: name), case .int(let cursor) = value { cursors[list] = cursor }
        }
        return cursors
    }

    private static func adding(_ counts: [String: WireValue], to sum: WireValue?) -> WireValue {
        var total: [String: WireValue] = if case .object(let object)? = sum { object } else { [:] }
        for (name, value) in counts {
            guard case .int(let count) = value else { continue }
            let before: Int = if case .int(let earlier)? = total[name] { earlier } else { 0 }
            total[name] = .int(before + count)
        }
        return .object(total)
    }
}
