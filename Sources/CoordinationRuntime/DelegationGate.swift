import Coordination
import CoordinationWire
import Synchronization

/// Holds taken through a control socket pass their host's delegations, as a mount's programs'
/// opens do (`ClaimGate`): those of items of `store`. A read whose item another host's
/// presenters present asks them first, as the mount's reads do.
package struct DelegationGate: ClaimGate {
    let store: SharedStore
    let delegations: any HostDelegations

    package init(store: SharedStore, delegations: any HostDelegations) {
        self.store = store
        self.delegations = delegations
    }

    private func need(_ intent: Intent) -> DelegationNeed? { store.delegationNeed(intent.kind, of: intent.target) }

    private func needs(_ intents: [Intent]) -> [DelegationNeed] { intents.compactMap(need) }

    /// The reads among `intents` whose items other hosts' presenters present.
    private func questions(_ intents: [Intent]) -> [DelegationNeed] {
        guard delegations.othersPresentAnything else { return [] }
        return needs(intents).filter { $0.asksPresenters && delegations.othersPresent(at: $0.path) }
    }

    package func asksFirst(_ intents: [Intent]) -> Bool { !questions(intents).isEmpty }

    package func ask(
        _ intents: [Intent],
        completion: @escaping @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void
    ) -> @Sendable () -> Void {
        pass(questions(intents)[...], asking: true, waits: true, completion: completion)
    }

    package func admits(_ intents: [Intent]) -> Bool {
        needs(intents).allSatisfy { delegations.covers($0.path, $0.access) }
    }

    package var coverStamp: UInt64 { delegations.lastCoverLoss }

    package func itemWhoseCoverWasLost(_ intents: [Intent], since stamp: UInt64) -> ItemPath? {
        intents.first { intent in need(intent).map { delegations.lostCover(of: [$0], since: stamp) } ?? false }?.path
    }

    package func admit(
        _ intents: [Intent], waits: Bool,
        completion: @escaping @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void
    ) -> @Sendable () -> Void {
        pass(needs(intents)[...], asking: false, waits: waits, completion: completion)
    }

    /// Asks the other hosts' presenters (`asking`), or for the delegations, of `needs` one after
    /// the other; `completion` once, as `admit`'s.
    private func pass(
        _ needs: ArraySlice<DelegationNeed>, asking: Bool, waits: Bool,
        completion: @escaping @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void
    ) -> @Sendable () -> Void {
        let state = Mutex(PassState())
        let delegations = self.delegations
        @Sendable func refuse(_ errno: String, _ message: String) {
            redeem(state.withLock { $0.takePromises() })
            completion((errno: errno, message: message), [])
        }
        @Sendable func next(_ rest: ArraySlice<DelegationNeed>) {
            guard let need = rest.first else { return completion(nil, state.withLock { $0.takePromises() }) }
            let answered: @Sendable (HostDelegationOutcome) -> Void = { outcome in
                if case .granted(let promise?) = outcome {
                    // Kept unless the pass was stopped meanwhile: then nobody will redeem it.
                    let kept = state.withLock { current -> Bool in
                        if !current.stopped { current.promises.append(promise) }
                        return !current.stopped
                    }
                    if !kept { promise.redeem() }
                }
                if state.withLock({ $0.stopped }) { return }
                switch outcome {
                case .granted: next(rest.dropFirst())
                // Let past another host's programs, it holds nothing there: as on one host.
                case .passed: next(rest.dropFirst())
                case .wouldWait: refuse("EAGAIN", "another host of the shared store holds it")
                case .refused(let why): refuse("ENOLCK", why)
                case .refusedThere(let errno):
                    refuse(ErrnoNames.name(of: errno), "another host of the shared store refused it")
                }
            }
            let stop =
                asking
                ? delegations.askPresenters(need, completion: answered)
                : delegations.acquire(need, waits: waits, completion: answered)
            let stopNow = state.withLock { current -> Bool in
                current.stop = stop
                return current.stopped
            }
            if stopNow { stop() }
        }
        next(needs)
        return {
            let (stop, promises) = state.withLock { current in
                current.stopped = true
                return (current.stop, current.takePromises())
            }
            stop?()
            redeem(promises)
        }
    }
}

/// A pass's state (`DelegationGate.pass`): stopped or not, what stops the wait under way, and
/// the promises of the grants so far, handed on with the pass or redeemed if it ends otherwise.
private struct PassState {
    var stopped = false
    var stop: (@Sendable () -> Void)?
    var promises: [any DelegationPromise] = []

    mutating func takePromises() -> [any DelegationPromise] {
        defer { promises = [] }
        return promises
    }
}

private func redeem(_ promises: [any DelegationPromise]) {
    for promise in promises { promise.redeem() }
}
