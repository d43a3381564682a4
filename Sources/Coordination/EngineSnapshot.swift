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

extension CoordinationEngine {
    /// A consistent picture of the engine for diagnosis (C27).
    public func snapshot() -> EngineSnapshot {
        state.withLock { state in
            EngineSnapshot(
                holders: (state.grants.map {
                    (
                        number: $0.record.number,
                        holder: EngineSnapshot.Holder(
                            grant: $0.id, identity: $0.record.identity, intents: $0.record.intents,
                            messaging: $0.record.messaging,
                            messagingSince: $0.record.messagingSince)
                    )
                }
                    + state.shortList.entries.map {
                        (
                            number: $0.number,
                            holder: EngineSnapshot.Holder(
                                grant: GrantID(shortListNumber: $0.number), identity: $0.identity, intents: [$0.intent],
                                messaging: [],
                                messagingSince: nil)
                        )
                    })
                    .sorted { $0.number < $1.number }.map(\.holder),
                waiters: state.waiting.map {
                    .init(
                        ticket: $0.ticket, identity: $0.request.identity, intents: $0.request.intents,
                        waitsFor: $0.blockers,
                        since: $0.since)
                },
                presenters: state.presenters.sorted { $0.key.rawValue < $1.key.rawValue },
                services: state.services.sorted { $0.key.rawValue < $1.key.rawValue }
            )
        }
    }
}
