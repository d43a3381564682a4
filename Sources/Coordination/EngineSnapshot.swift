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
    /// The most entries taken of each list.
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
    /// when it takes every one. Only the keys are sorted, and only when there are more than fit.
    func end(of list: List, _ keys: [UInt64]) -> (takes: (UInt64) -> Bool, last: UInt64?) {
        let after = self.after[list]
        func isAfter(_ key: UInt64) -> Bool { after.map { key > $0 } ?? true }
        guard lists.contains(list) else { return ({ _ in false }, nil) }
        var candidates = keys.filter(isAfter)
        guard candidates.count > limit else { return (isAfter, nil) }
        candidates.sort()
        let last = candidates[limit - 1]
        return ({ isAfter($0) && $0 <= last }, last)
    }
}

extension CoordinationEngine {
    /// A consistent picture of the engine for diagnosis (C27).
    public func snapshot() -> EngineSnapshot { snapshot(.whole) }

    /// A consistent picture of part of the engine (C27): `window` says which.
    public func snapshot(_ window: SnapshotWindow) -> EngineSnapshot {
        // Copies on write: the lock is held for four reference counts, however large the tables.
        let (grants, listed, waiting, presenters, services) = state.withLock { state in
            (state.grants, state.shortList.entries, state.waiting, state.presenters, state.services)
        }
        var next: [SnapshotWindow.List: UInt64] = [:]

        let holding = window.end(of: .holders, grants.map { $0.record.number } + listed.map(\.number))
        next[.holders] = holding.last
        var numbered: [(number: UInt64, holder: EngineSnapshot.Holder)] = []
        for (id, record) in grants where holding.takes(record.number) {
            let holder = EngineSnapshot.Holder(
                grant: id, identity: record.identity, intents: record.intents, messaging: record.messaging,
                messagingSince: record.messagingSince)
            numbered.append((record.number, holder))
        }
        for entry in listed where holding.takes(entry.number) {
            let holder = EngineSnapshot.Holder(
                grant: GrantID(shortListNumber: entry.number), identity: entry.identity, intents: [entry.intent],
                messaging: [], messagingSince: nil)
            numbered.append((entry.number, holder))
        }
        let holders = numbered.sorted { $0.number < $1.number }.map(\.holder)

        let waits = window.end(of: .waiters, waiting.map(\.ticket.rawValue))
        next[.waiters] = waits.last
        let waiters = waiting.filter { waits.takes($0.ticket.rawValue) }.sorted {
            $0.ticket.rawValue < $1.ticket.rawValue
        }
        .map {
            EngineSnapshot.Waiter(
                ticket: $0.ticket, identity: $0.request.identity, intents: $0.request.intents,
                waitsFor: $0.blockers, since: $0.since)
        }

        let presenting = window.end(of: .presenters, presenters.keys.map(\.rawValue))
        next[.presenters] = presenting.last
        let serving = window.end(of: .services, services.keys.map(\.rawValue))
        next[.services] = serving.last

        return EngineSnapshot(
            holders: holders, waiters: waiters,
            presenters: presenters.filter { presenting.takes($0.key.rawValue) }.sorted {
                $0.key.rawValue < $1.key.rawValue
            },
            services: services.filter { serving.takes($0.key.rawValue) }.sorted { $0.key.rawValue < $1.key.rawValue },
            totals: [
                .holders: grants.count + listed.count, .waiters: waiting.count, .presenters: presenters.count,
                .services: services.count
            ],
            next: next)
    }
}
