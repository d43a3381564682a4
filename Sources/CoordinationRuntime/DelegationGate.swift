import Coordination
import Synchronization

/// Holds taken through a control socket pass their host's delegations, as a mount's programs'
/// opens do (`ClaimGate`): those of items of `store`.
package struct DelegationGate: ClaimGate {
    let store: SharedStore
    let delegations: any HostDelegations

    package init(store: SharedStore, delegations: any HostDelegations) {
        self.store = store
        self.delegations = delegations
    }

    private func needs(_ intents: [Intent]) -> [(path: String, access: DelegatedAccess)] {
        intents.compactMap { intent in store.delegationNeed(intent.kind, of: intent.target) }
    }

    package func admits(_ intents: [Intent]) -> Bool {
        needs(intents).allSatisfy { delegations.covers($0.path, writing: $0.access.writes) }
    }

    package func admit(
        _ intents: [Intent], waits: Bool,
        completion: @escaping @Sendable ((errno: String, message: String)?) -> Void
    ) -> @Sendable () -> Void {
        let state = Mutex<(stopped: Bool, stop: (@Sendable () -> Void)?)>((false, nil))
        let delegations = self.delegations
        @Sendable func next(_ rest: ArraySlice<(path: String, access: DelegatedAccess)>) {
            guard let need = rest.first else { return completion(nil) }
            let stop = delegations.acquire(need.path, need.access, waits: waits) { outcome in
                if state.withLock({ $0.stopped }) { return }
                switch outcome {
                case .granted: next(rest.dropFirst())
                case .wouldWait: completion((errno: "EAGAIN", message: "another host of the shared store holds it"))
                case .refused(let why): completion((errno: "ENOLCK", message: why))
                }
            }
            let stopNow = state.withLock { current -> Bool in
                current.stop = stop
                return current.stopped
            }
            if stopNow { stop() }
        }
        next(needs(intents)[...])
        return {
            let stop = state.withLock { current -> (@Sendable () -> Void)? in
                current.stopped = true
                return current.stop
            }
            stop?()
        }
    }
}
