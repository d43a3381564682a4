/// Who holds, who waits and who presents, at one moment (C27).
public struct EngineSnapshot: Sendable, CustomStringConvertible {
    public struct Holder: Sendable {
        public let grant: GrantID
        public let identity: CoordinatorIdentity
        public let intents: [Intent]
        public let messaging: Set<CoordinatorIdentity>
        /// Since when it has been asking presenters, while it is.
        public let messagingSince: ContinuousClock.Instant?
    }
    public struct Waiter: Sendable {
        public let ticket: TicketID
        public let identity: CoordinatorIdentity
        public let intents: [Intent]
        public let waitsFor: Set<CoordinatorIdentity>
        /// When it began to wait.
        public let since: ContinuousClock.Instant
    }

    public let holders: [Holder]
    public let waiters: [Waiter]
    public let presenters: [(PresenterID, PresenterRecord)]
    public let services: [(ServiceRegistrationID, ServiceRecord)]
    /// How many entries each list has in all, inside the window or not.
    public let totals: [SnapshotWindow.List: Int]
    /// Per list with entries past the window: the cursor to ask the next window from.
    public let next: [SnapshotWindow.List: UInt64]

    public var isIdle: Bool { holders.isEmpty && waiters.isEmpty }

    public var description: String {
        func describe(_ intent: Intent) -> String {
            switch intent.kind {
            case .reading(let options): return "read(\(options.rawValue)) \(intent.path)"
            case .writing(let options): return "write(\(options.rawValue)) \(intent.path)"
            }
        }
        var lines: [String] = []
        for holder in holders {
            lines.append(
                "HOLD \(holder.grant) \(holder.identity): " + holder.intents.map(describe).joined(separator: ", "))
        }
        for waiter in waiters {
            lines.append(
                "WAIT \(waiter.ticket) \(waiter.identity): " + waiter.intents.map(describe).joined(separator: ", ")
                    + " <- " + waiter.waitsFor.map(\.description).sorted().joined(separator: ", "))
        }
        for (id, record) in presenters {
            lines.append("PRESENT \(id) \(record.owner): \(record.path?.string ?? "(no item yet)")")
        }
        for (id, record) in services {
            lines.append("SERVICE \(id) \(record.owner): \(record.name) for \(record.path)")
        }
        return lines.isEmpty ? "(idle)" : lines.joined(separator: "\n")
    }
}

/// Which part of each list a snapshot carries: at most `limit` entries of a list, in the list's
/// order, after the cursor `after` gives it. A mount that presents a few hundred thousand items
/// is described a window at a time: the engine's lock is held only to take its tables (copied
/// on write, so in constant time), and no request sorts or describes more than its window.
public struct SnapshotWindow: Sendable {
    /// The lists of a snapshot, each in its own order: holders by grant number, waiters by
    /// ticket, presenters and services by id.
    public enum List: String, CaseIterable, Hashable, Sendable {
        case holders, waiters, presenters, services
    }

    /// The lists taken; the others come empty, and are still counted in `totals`.
    public var lists: Set<List>
    /// The most entries taken of each list; a holder or a waiter counts once per intent.
    public var limit: Int
    /// Per list, the cursor of the entry before the window (the `next` of the window before).
    public var after: [List: UInt64]

    public init(lists: Set<List> = Set(List.allCases), limit: Int = .max, after: [List: UInt64] = [:]) {
        precondition(limit > 0, "a window takes at least one entry of each list it takes")
        self.lists = lists
        self.limit = limit
        self.after = after
    }

    /// Every entry of every list.
    public static let whole = SnapshotWindow()

    /// The keys after the cursor of `list`, and the last key the window takes of them: nil
    /// when it takes every one. Only the keys are sorted, and only when more than fit. An entry
    /// may count as more than one (a hold of many items counts once per item, so that a window
    /// of holders describes at most `limit` intents); the window takes at least one, however
    /// heavy.
    func end(of list: List, _ keys: [(key: UInt64, weight: Int)]) -> (takes: (UInt64) -> Bool, last: UInt64?) {
        let after = self.after[list]
        func isAfter(_ key: UInt64) -> Bool { after.map { key > $0 } ?? true }
        guard lists.contains(list) else { return ({ _ in false }, nil) }
        var candidates = keys.filter { isAfter($0.key) }
        guard candidates.reduce(0, { $0 + $1.weight }) > limit else { return (isAfter, nil) }
        candidates.sort { $0.key < $1.key }
        var taken = 0
        for (index, candidate) in candidates.enumerated() {
            if taken > 0 && taken + candidate.weight > limit {
                let last = candidates[index - 1].key
                return ({ isAfter($0) && $0 <= last }, last)
            }
            taken += candidate.weight
        }
        // One entry heavier than the limit, alone: the window takes it, and it was the last.
        return (isAfter, nil)
    }
}

extension CoordinationEngine {
    /// A consistent picture of the engine for diagnosis (C27).
    public func snapshot() -> EngineSnapshot { snapshot(.whole) }

    /// A consistent picture of part of the engine (C27): `window` says which.
    ///
    /// The lock is held for a scan of the tables' keys, then for a look-up of the entries the
    /// window takes: never for a sort, a copy of a table, or a second pass over all of it. A
    /// status of a mount with a few hundred thousand watches must not stall its opens. Between
    /// the two an entry may end (it is left out) or begin (with a key past the window's end,
    /// since keys only grow: it comes in a later window).
    public func snapshot(_ window: SnapshotWindow) -> EngineSnapshot {
        typealias Keys = [(key: UInt64, weight: Int)]
        let (keys, grantIDs, totals) = state.withLock { state in
            var keys: [SnapshotWindow.List: Keys] = [:]
            var grantIDs: [GrantID] = []
            if window.lists.contains(.holders) {
                var holders: Keys = []
                for (id, record) in state.grants {
                    holders.append((record.number, record.intents.count))
                    grantIDs.append(id)
                }
                keys[.holders] = holders + state.shortList.entries.map { (key: $0.number, weight: 1) }
            }
            if window.lists.contains(.waiters) {
                keys[.waiters] = state.waiting.map { (key: $0.ticket.rawValue, weight: $0.request.intents.count) }
            }
            if window.lists.contains(.presenters) {
                keys[.presenters] = state.presenters.keys.map { (key: $0.rawValue, weight: 1) }
            }
            if window.lists.contains(.services) {
                keys[.services] = state.services.keys.map { (key: $0.rawValue, weight: 1) }
            }
            let totals: [SnapshotWindow.List: Int] = [
                .holders: state.grants.count + state.shortList.entries.count, .waiters: state.waiting.count,
                .presenters: state.presenters.count, .services: state.services.count
            ]
            return (keys, grantIDs, totals)
        }
        var next: [SnapshotWindow.List: UInt64] = [:]
        /// The keys of `list` the window takes, in order, and the positions they had in the scan.
        func taken(_ list: SnapshotWindow.List) -> [(key: UInt64, position: Int)] {
            let scanned = keys[list] ?? []
            let end = window.end(of: list, scanned)
            next[list] = end.last
            return scanned.enumerated().filter { end.takes($0.element.key) }.map { ($0.element.key, $0.offset) }
                .sorted { $0.key < $1.key }
        }
        let (holding, waits, presenting, serving) = (
            taken(.holders), taken(.waiters), taken(.presenters), taken(.services)
        )

        let (holders, waiters, presenters, services) = state.withLock { state in
            var holders: [EngineSnapshot.Holder] = []
            for (number, position) in holding {
                if position < grantIDs.count {
                    let id = grantIDs[position]
                    let holder = state.grants.readRecord(id) { record in
                        EngineSnapshot.Holder(
                            grant: id, identity: record.identity, intents: record.intents,
                            messaging: record.messaging, messagingSince: record.messagingSince)
                    }
                    if let holder { holders.append(holder) }
                } else if let entry = state.shortList.entries.first(where: { $0.number == number }) {
                    // The short list is short: a scan of it is its look-up.
                    holders.append(
                        EngineSnapshot.Holder(
                            grant: GrantID(shortListNumber: entry.number), identity: entry.identity,
                            intents: [entry.intent], messaging: [], messagingSince: nil))
                }
            }
            let tickets = Set(waits.map(\.key))
            let waiters = state.waiting.filter { tickets.contains($0.ticket.rawValue) }.map {
                EngineSnapshot.Waiter(
                    ticket: $0.ticket, identity: $0.request.identity, intents: $0.request.intents,
                    waitsFor: $0.blockers, since: $0.since)
            }
            let presenters = presenting.compactMap { key, _ -> (PresenterID, PresenterRecord)? in
                let id = PresenterID(rawValue: key)
                return state.presenters[id].map { (id, $0) }
            }
            let services = serving.compactMap { key, _ -> (ServiceRegistrationID, ServiceRecord)? in
                let id = ServiceRegistrationID(rawValue: key)
                return state.services[id].map { (id, $0) }
            }
            return (holders, waiters, presenters, services)
        }
        return EngineSnapshot(
            holders: holders, waiters: waiters.sorted { $0.ticket.rawValue < $1.ticket.rawValue },
            presenters: presenters, services: services, totals: totals, next: next)
    }
}
