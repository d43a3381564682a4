/// Which part of a `status` a client asks for. A shared mount may hold, queue and present
/// hundreds of thousands of entries; a reply carries at most `limit` of each list (the server's
/// default when nil), and says in `next` where each list goes on. A client reads the rest one
/// list at a time: `list` with `after` set to that `next`.
public struct StatusPage: Hashable, Sendable {
    /// The lists of a status reply.
    public enum List: String, CaseIterable, Sendable {
        case holders, waiters, presenters, services
    }

    /// Only this list (nil: every list).
    public var list: List?
    /// The cursor the previous page gave for `list` in its `next`.
    public var after: Int?
    /// The most entries of each list, up to the server's maximum (nil: the server's default).
    public var limit: Int?

    public init(list: List? = nil, after: Int? = nil, limit: Int? = nil) {
        self.list = list
        self.after = after
        self.limit = limit
    }

    init(_ object: [String: JSON]) throws(WireError) {
        if let name = object["list"] {
            guard let text = name.string, let list = List(rawValue: text) else {
                throw WireError("\"list\" must be one of \(List.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            self.list = list
        }
        if let after = object["after"] {
            guard let cursor = after.int, cursor >= 0 else {
                throw WireError("\"after\" must be a cursor from \"next\"")
            }
            guard list != nil else { throw WireError("\"after\" needs \"list\": a cursor belongs to one list") }
            self.after = cursor
        }
        if let limit = object["limit"] {
            guard let count = limit.int, count > 0 else { throw WireError("\"limit\" must be a positive whole number") }
            self.limit = count
        }
    }
}
