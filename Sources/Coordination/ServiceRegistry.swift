/// A named service vended for an item and everything inside it (S1).
public struct ServiceRecord: Hashable, Sendable {
    public let name: String
    /// The item it was vended for; it follows moves.
    public internal(set) var path: ItemPath
    /// The provider: its session's end withdraws the service.
    public let owner: CoordinatorIdentity
}

extension CoordinationEngine {
    /// The longest service name accepted.
    public static let maximumServiceNameLength = 255

    /// Vends `name` for `path` and everything inside it.
    public func vendService(
        named name: String, at path: ItemPath, owner: CoordinatorIdentity
    )
        throws(CoordinationError) -> ServiceRegistrationID
    {
        if name.isEmpty { throw .invalidRequest("a service name cannot be empty") }
        if name.utf8.count > Self.maximumServiceNameLength {
            throw .invalidRequest("a service name is at most \(Self.maximumServiceNameLength) bytes")
        }
        if name.contains(where: { $0.isNewline || $0 == "\0" }) {
            throw .invalidRequest("a service name cannot hold a newline or NUL")
        }
        return withState { state in
            let id = ServiceRegistrationID(rawValue: state.takeNumber())
            state.services[id] = ServiceRecord(name: name, path: path, owner: owner)
            return id
        }
    }

    /// Withdraws a vended service; unknown ids are ignored.
    public func withdrawService(_ id: ServiceRegistrationID) {
        withState { state in state.services[id] = nil }
    }

    /// The services of `path`: per name, the registration nearest up the tree (S2, S4) among
    /// those `trusted` accepts — a client of another user's provider is never captured by a
    /// nearer registration it does not trust. `trusted` runs after the engine's lock is let go.
    public func services(
        for path: ItemPath,
        trusted: (ServiceRegistrationID, ServiceRecord) -> Bool = { _, _ in true }
    )
        -> [String: (ServiceRegistrationID, ServiceRecord)]
    {
        let covering = state.withLock { state in state.services.filter { path.isSameOrInside($0.value.path) } }
        var best: [String: (ServiceRegistrationID, ServiceRecord)] = [:]
        for (id, record) in covering where trusted(id, record) {
            if let current = best[record.name], current.1.path.string.utf8.count >= record.path.string.utf8.count {
                continue
            }
            best[record.name] = (id, record)
        }
        return best
    }

    /// The registration, if it is still vended.
    public func service(_ id: ServiceRegistrationID) -> ServiceRecord? {
        state.withLock { $0.services[id] }
    }
}

extension CoordinationEngine {
    /// What the presenters of `path` (and of the packages it lies in) are told when an access to
    /// it, by `accessor`, went ahead without waiting any longer for its holders.
    public func brokenCoordinationNotices(
        at path: ItemPath, by accessor: CoordinatorIdentity? = nil
    )
        -> [PresenterDelivery<PresenterNotification>]
    {
        state.withLock { state in
            var deliveries: [PresenterDelivery<PresenterNotification>] = []
            for id in state.presenterTree.presenters(at: path) {
                deliveries.append(
                    PresenterDelivery(
                        presenter: id, presentedPath: path, presentsPackage: false,
                        messages: [.coordinationWasBroken], accessor: accessor))
            }
            return deliveries
        }
    }
}

extension State {
    /// Services of an item a grant deleted end with it; `outcomes` parallels `intents`.
    mutating func endServices(ofItemsDeletedBy intents: some Sequence<Intent>, outcomes: some Sequence<IntentOutcome>) {
        guard !services.isEmpty else { return }
        for (intent, outcome) in zip(intents, outcomes) where outcome.existedBefore && !outcome.existsAfter {
            services = services.filter { !$0.value.path.isSameOrInside(intent.path) }
        }
    }
}
