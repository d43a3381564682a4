import LinuxSystem
import Coordination
import Synchronization
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Holds: intents a client holds over the socket (granted, waited for, nested in another hold of
/// the same named coordinator), the moves a holder reports, the BROKEN events it is told, and
/// how holds end.
extension ClientConnection {
    /// The identity of the coordinator the client named `name`, counting one more hold of it.
    private func namedCoordinator(_ name: String) -> CoordinatorIdentity {
        let (identity, made) = lock.withLock { () -> (CoordinatorIdentity, Bool) in
            if let known = namedCoordinators[name] {
                namedCoordinators[name] = (known.identity, known.holds + 1)
                return (known.identity, false)
            }
            let identity = CoordinatorIdentity.client(process: peer.pid, number: server.nextCoordinatorNumber())
            namedCoordinators[name] = (identity, 1)
            return (identity, true)
        }
        // Its purpose identifier, for the origin presenters are told: the name, or the purpose
        // in the FileCoordinator's own form ("purpose:ID"); a presenter's coordinator has none.
        if made && !name.hasPrefix("object:") {
            server.domain.setPurpose(name.hasPrefix("purpose:") ? String(name.dropFirst(8)) : name, for: identity)
        }
        return identity
    }

    /// One hold of the coordinator named `name` has ended.
    private func dropNamedCoordinator(_ name: String?) {
        guard let name else { return }
        let ended = lock.withLock { () -> CoordinatorIdentity? in
            guard let known = namedCoordinators[name] else { return nil }
            namedCoordinators[name] = known.holds > 1 ? (known.identity, known.holds - 1) : nil
            return known.holds > 1 ? nil : known.identity
        }
        if let ended { server.domain.setPurpose(nil, for: ended) }
    }

    /// `asked`: the other hosts' presenters of its items have been asked already (`ClaimGate.ask`).
    /// `promised`: the promises of the grants its host waited for (`DelegationPromise`),
    /// redeemed once it is claimed and has looked again.
    func hold(
        _ id: Int, _ wanted: [WireIntent], _ wait: Bool, _ timeout: Double?, _ inherit: Bool, _ presenter: Int?,
        _ coordinatorName: String?, _ holderID: Int? = nil, asked: Bool = false,
        promised: [any DelegationPromise] = []
    ) {
        let limit = server.counts.limits.holdsPerConnection
        if lock.withLock({ holds.count + pendingHolds.count }) >= limit {
            return send(
                .error(
                    id: id, errno: "ENOSPC",
                    message: "too many holds on one connection (at most \(limit), granted or waited for)"))
        }
        let holder = holderID.map { Int32($0) } ?? peer.pid
        if holder != peer.pid && !Self.isAncestor(holder, of: peer.pid, sameUserAs: peer.uid) {
            return send(
                .error(id: id, errno: "EPERM", message: "process \(holder) is not an ancestor of yours of your user"))
        }
        // Taken for a presenter of this client: its own work, which passes while it is asked.
        let coordinator: CoordinatorIdentity
        if holder != peer.pid {
            // The holder's own: its opens through a mount (and, inheriting, its children's) are
            // the same coordinator, and neither waits for the other. A hold all the same, not
            // the holder's open (`.process`): it never settles, and only another user's access
            // goes past it at the break time.
            coordinator = .client(process: holder, number: server.nextCoordinatorNumber())
        } else if let presenter {
            guard let watch = lock.withLock({ watches[presenter] }) else {
                return send(.error(id: id, errno: "EINVAL", message: "no watch \(presenter) of yours"))
            }
            coordinator = watch.owner
        } else if let coordinatorName {
            coordinator = namedCoordinator(coordinatorName)
        } else {
            coordinator = newCoordinator()
        }
        let name = presenter == nil ? coordinatorName : nil
        var intents: [Intent] = []
        for item in wanted {
            let resolved: (target: AccessTarget, realPath: String)
            do { resolved = try server.resolver.resolve(item.path) } catch {
                dropNamedCoordinator(name); return send(.error(id: id, errno: error.errno, message: error.message))
            }
            guard let kind = Self.kind(item) else {
                dropNamedCoordinator(name);
                return send(
                    .error(
                        id: id, errno: "EINVAL",
                        message: "unknown options \(item.options ?? []) for a \(item.access.rawValue)"))
            }
            guard
                Permissions.allows(
                    peer, resolved.realPath, item.access == .read ? .read : .write, from: server.resolver.permissionBase
                )
            else {
                dropNamedCoordinator(name);
                return send(.error(id: id, errno: "EACCES", message: "cannot \(item.access.rawValue) '\(item.path)'"))
            }
            intents.append(Intent(kind, resolved.target))
        }
        // Inside another granted hold of the same named coordinator that covers every item.
        if let name,
            let outer = lock.withLock({
                holds.values.first { held in
                    held.coordinatorName == name
                        && intents.allSatisfy { intent in
                            held.claim.intents.contains {
                                ($0.kind.isWrite || !intent.kind.isWrite) && AccessorHolds.covers($0, intent.target)
                            }
                        }
                }
            })
        {
            if let refusal = server.counts.takeMemory(ClientLimits.bytesPerHold, for: peer.uid) {
                dropNamedCoordinator(name)
                return send(.error(id: id, errno: "ENOMEM", message: refusal))
            }
            var inner = Held(claim: outer.claim, coordinatorName: name, token: 0, realPaths: [], existedBefore: [])
            inner.nested = true
            inner.bytes = ClientLimits.bytesPerHold
            // Asked again after a wait at the claim gate, this runs on another thread: the
            // connection may have closed meanwhile, and a hold kept then kept its memory for good.
            let number = lock.withLock { () -> Int? in
                guard !closed else { return nil }
                lastNumber += 1
                holds[lastNumber] = inner
                return lastNumber
            }
            guard let number else { return end(inner, changed: false) }
            return send(
                .ok(id: id, fields: ["hold": .int(number), "paths": .array(intents.map { .string($0.path.string) })]))
        }
        let duplicate = lock.withLock { pendingHolds[id] != nil || pendingAdmissions[id] != nil }
        if duplicate {
            dropNamedCoordinator(name)
            return send(.error(id: id, errno: "EINVAL", message: "request \(id) is already pending"))
        }
        // The decoder has bounded it (`Seconds`): the conversion cannot trap.
        let claimTimeout: Duration? = timeout.flatMap { try? Seconds.duration($0).get() } ?? server.waitTimeout
        // Past the server's gate first (another host's delegation, on a mount of a shared
        // store), then claimed here; asked again once granted, as a mount's opens are. A read
        // of an item another host's presenters present asks them before anything, once.
        if !asked, let gate = server.claimGate, gate.asksFirst(intents) {
            return admit(id, intents, through: gate, asking: true, wait: wait, timeout: claimTimeout) { [self] _ in
                hold(id, wanted, wait, timeout, inherit, presenter, coordinatorName, holderID, asked: true)
            } refused: { [self] in
                dropNamedCoordinator(name)
            }
        }
        if let gate = server.claimGate, !gate.admits(intents) {
            return admit(id, intents, through: gate, wait: wait, timeout: claimTimeout) { [self] promised in
                hold(
                    id, wanted, wait, timeout, inherit, presenter, coordinatorName, holderID, asked: asked,
                    promised: promised)
            } refused: { [self] in
                dropNamedCoordinator(name)
            }
        }
        // Counted against the user's memory from here, granted or waited for, to its end.
        let bytes = ClientLimits.bytes(ofHoldOn: intents.map(\.path.string))
        if let refusal = server.counts.takeMemory(bytes, for: peer.uid) {
            dropNamedCoordinator(name)
            return send(.error(id: id, errno: "ENOMEM", message: refusal))
        }
        // Whose hold it is, across users a lease: the client's user's, or the holder's (root
        // may hold for another user's process).
        let user = holder == peer.pid ? peer.uid : CoordinatorUsers.user(of: coordinator) ?? peer.uid
        let holdWaits = server.holdWaits
        // The completion holds the connection: a grant that comes after the client has gone
        // must still find it, to give the grant back (`closed` below). Held weakly, a hold
        // granted then stayed for good.
        let waiting = Claim.begin(
            in: server.domain, identity: coordinator, intents: intents, waits: wait, timeout: claimTimeout,
            user: user, passesOtherUsers: holdWaits?.passesOtherUsers ?? false
        ) { [self] result in
            // Claimed (or refused) and looked again: a recall that came with the grants may go on.
            defer { for promise in promised { promise.redeem() } }
            let unwatch = self.lock.withLock { () -> (@Sendable () -> Void)? in
                _ = self.pendingHolds.removeValue(forKey: id)
                return self.watchedHolds.removeValue(forKey: id)
            }
            unwatch?()
            // Stamped before its cover is looked at: a loss after the look is one it is judged by.
            let cover = self.server.claimGate?.coverStamp
            switch result {
            case .failure(let failure):
                self.server.counts.returnMemory(bytes, of: self.peer.uid)
                self.dropNamedCoordinator(name)
                self.send(.error(id: id, errno: Self.errnoName(failure), message: "\(failure.error)"))
            case .success(let claim) where self.server.claimGate.map({ !$0.admits(claim.intents) }) ?? false:
                // Its host's delegation was recalled while it was claimed: given back, asked again.
                claim.end(
                    outcomes: claim.intents.map { _ in
                        IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
                    },
                    in: self.server.domain)
                self.server.counts.returnMemory(bytes, of: self.peer.uid)
                self.dropNamedCoordinator(name)
                self.hold(id, wanted, wait, timeout, inherit, presenter, coordinatorName, holderID, asked: asked)
            case .success(let claim):
                // What the process does through a mount on these items is now its accessor's.
                let token = self.server.domain.accessorHolds.add(claim, of: holder, cover: cover)
                // Where the items are as granted: one moved while the hold waited is where it went.
                let granted = claim.intents.map { (try? self.server.resolver.resolve($0.path.string).realPath) ?? "" }
                var held = Held(
                    claim: claim, coordinatorName: name, token: token, realPaths: granted,
                    existedBefore: granted.map(Self.exists))
                held.coordinator = coordinator
                held.holder = holder
                held.bytes = bytes
                held.cover = cover
                let number = self.lock.withLock { () -> Int? in
                    guard !self.closed else { return nil }
                    self.lastNumber += 1
                    self.holds[self.lastNumber] = held
                    if inherit { self.inheritingHolds.insert(self.lastNumber) }
                    return self.lastNumber
                }
                guard let number else { return self.end(held, changed: false) }
                self.updateInheritance()
                self.send(
                    .ok(
                        id: id,
                        fields: [
                            "hold": .int(number),
                            "paths": .array(claim.intents.map { .string($0.path.string) })
                        ]))
            }
        }
        // A connection closed meanwhile (its writer found the client gone) cancelled only the
        // waits it knew of: this one is cancelled here.
        guard let waiting else { return }  // granted at once
        var closedMeanwhile = false
        _ = waiting.ifUnsettled {
            lock.withLock { if closed { closedMeanwhile = true } else { pendingHolds[id] = waiting } }
            // Watched until its completion: a mount lets it past other users' holds at the break time.
            if !closedMeanwhile, let holdWaits {
                let unwatch = holdWaits.watch(waiting, user: user)
                lock.withLock { watchedHolds[id] = unwatch }
            }
        }
        if closedMeanwhile { waiting.cancel() }
    }

    /// Ends hold `number`; `changed` says the holder changed its items (presenters are told).
    /// On a host of a shared store the reply names (`cover_lost`) an item another host may
    /// have had while it was held (a lease lost, a recall broken at the break time).
    func release(_ id: Int, _ number: Int, _ changed: Bool) {
        guard
            let held = lock.withLock({ () -> Held? in
                inheritingHolds.remove(number)
                return holds.removeValue(forKey: number)
            })
        else { return send(.error(id: id, errno: "EINVAL", message: "no hold \(number)")) }
        updateInheritance()
        // Asked before the claim ends: the answer is the hold's, not what came after it.
        let lost = held.cover.flatMap { server.claimGate?.itemWhoseCoverWasLost(held.claim.intents, since: $0) }
        end(held, changed: changed)
        send(.ok(id: id, fields: lost.map { ["cover_lost": .string($0.string)] } ?? [:]))
    }

    /// Stops waiting for the hold that request `request` asked for.
    func cancelPendingHold(_ id: Int, _ request: Int) {
        if let stop = lock.withLock({ pendingAdmissions.removeValue(forKey: request) }) {
            stop()
            send(.error(id: request, errno: "ECANCELED", message: "the hold was cancelled"))
            return send(.ok(id: id, fields: [:]))
        }
        guard let claim = lock.withLock({ pendingHolds[request] }) else {
            return send(.error(id: id, errno: "EINVAL", message: "no pending hold \(request)"))
        }
        claim.cancel()
        send(.ok(id: id, fields: [:]))
    }

    /// Waits at `gate` for `intents` (at most `timeout`), then runs `then`; or answers request
    /// `id` with the refusal (EBUSY past the timeout) and runs `refused`. `asking`: for the other
    /// hosts' presenters' answers (`ClaimGate.ask`), not for the delegations.
    private func admit(
        _ id: Int, _ intents: [Intent], through gate: any ClaimGate, asking: Bool = false, wait: Bool,
        timeout: Duration?, then: @escaping @Sendable ([any DelegationPromise]) -> Void,
        refused: @escaping @Sendable () -> Void
    ) {
        let finished = Mutex(false)
        let finish: @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void = {
            [self] refusal, promised in
            guard
                finished.withLock({ done in
                    defer { done = true }; return !done
                })
            else { return }
            lock.withLock { _ = pendingAdmissions.removeValue(forKey: id) }
            if let refusal {
                refused()
                send(.error(id: id, errno: refusal.errno, message: refusal.message))
            } else {
                then(promised)
            }
        }
        let stop =
            asking
            ? gate.ask(intents, completion: { finish($0, $1) })
            : gate.admit(intents, waits: wait, completion: { finish($0, $1) })
        let stopping: @Sendable () -> Void = {
            finished.withLock { $0 = true }
            stop()
            refused()
        }
        let closedMeanwhile = lock.withLock { () -> Bool in
            if closed { return true }
            pendingAdmissions[id] = stopping
            return false
        }
        if closedMeanwhile { return stopping() }
        if let timeout {
            let (seconds, attoseconds) = timeout.components
            DispatchQueue.global().asyncAfter(deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18) {
                guard !finished.withLock({ $0 }) else { return }
                stop()
                finish((errno: "EBUSY", message: "timed out waiting for another host of the shared store"), [])
            }
        }
    }

    /// A move the holder made inside hold `number`. The hold must write both places (the
    /// item or a directory around it), as Apple's own way to coordinate a move does (C40), and
    /// the client must be one who could have made that rename: write both places and read where
    /// the item was. Otherwise any client holding its own file could name another user's item
    /// as `from` and have that user's presenters and services follow it into the client's file.
    func moved(_ id: Int, _ number: Int, _ from: String, _ to: String) {
        guard let held = lock.withLock({ holds[number] }) else {
            return send(.error(id: id, errno: "EINVAL", message: "no hold \(number)"))
        }
        let source: (target: AccessTarget, realPath: String), destination: (target: AccessTarget, realPath: String)
        do {
            destination = try server.resolver.resolve(to)
            source = try server.resolver.resolve(from)
        } catch {
            return send(.error(id: id, errno: error.errno, message: error.message))
        }
        let writes = held.claim.intents.filter { $0.kind.isWrite }
        for (named, path) in [(from, source.target.path), (to, destination.target.path)]
        where !writes.contains(where: { path.isSameOrInside($0.path) }) {
            return send(
                .error(
                    id: id, errno: "EPERM",
                    message:
                        "hold \(number) does not write '\(named)': a move is reported inside a write of both places"))
        }
        let base = server.resolver.permissionBase
        guard Permissions.allows(peer, source.realPath, .read, from: base),
            Permissions.allows(peer, source.realPath, .write, from: base),
            Permissions.allows(peer, destination.realPath, .write, from: base)
        else {
            return send(.error(id: id, errno: "EACCES", message: "cannot move '\(from)' to '\(to)'"))
        }
        var moving = source.target
        moving.isDirectory = destination.target.isDirectory
        held.claim.reportMove(from: moving, to: destination.target, in: server.domain)
        send(.ok(id: id, fields: [:]))
    }

    /// Tells the client of each of its holds whose grant is among `grants`, those an access to
    /// `paths` went past, that the access went ahead without waiting for it any longer: one
    /// BROKEN event a hold (`cookie` is the hold), naming its item the access went past.
    func tellBroken(_ grants: Set<GrantID>, along paths: [ItemPath]) {
        let broken = lock.withLock {
            holds.compactMap { entry -> (number: Int, path: ItemPath?)? in
                // A nested hold shares its outer hold's grant: the outer one is told.
                guard !entry.value.nested, let grant = entry.value.claim.grantID, grants.contains(grant) else {
                    return nil
                }
                return (entry.key, Self.itemPassed(of: entry.value.claim.intents, along: paths))
            }.sorted { $0.number < $1.number }
        }
        for (number, path) in broken {
            guard let path = path ?? paths.first else { continue }
            send(.event(EventRecord(wd: 0, mask: .broken, cookie: UInt64(number), name: "", path: path.string)))
        }
    }

    /// Which of a hold's items (`intents`) an access to `paths` went past: the first it holds
    /// at one of them, else the first above or inside one (a directory held, or an item inside
    /// a directory removed), else its first.
    static func itemPassed(of intents: [Intent], along paths: [ItemPath]) -> ItemPath? {
        for path in paths {
            if let same = intents.first(where: { $0.path == path }) { return same.path }
        }
        for path in paths {
            if let near = intents.first(where: { path.isSameOrInside($0.path) || $0.path.isSameOrInside(path) }) {
                return near.path
            }
        }
        return intents.first?.path
    }

    /// Ends a hold: presenters learn what became of each written item (changed, deleted or
    /// made), and the process's requests through a mount are its own again.
    func end(_ held: Held, changed: Bool) {
        // The coordinator's name goes after its last hold has told presenters (its purpose is
        // part of the origin they are told), and the hold's memory once it holds nothing.
        defer {
            dropNamedCoordinator(held.coordinatorName)
            server.counts.returnMemory(held.bytes, of: peer.uid)
        }
        if held.nested { return }
        server.domain.accessorHolds.remove(held.token, of: held.holder)
        let intents = held.claim.intents
        held.claim.end(
            outcomes: intents.indices.map { index in
                guard changed, intents[index].kind.isWrite, index < held.realPaths.count else {
                    return IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
                }
                return IntentOutcome(
                    existedBefore: held.existedBefore[index], existsAfter: Self.exists(held.realPaths[index]))
            }, in: server.domain)
    }

    private static func exists(_ realPath: String) -> Bool {
        var info = stat()
        return !realPath.isEmpty && FileSystemName.withCString(realPath) { lstat($0, &info) } == 0
    }

    /// The processes whose descendants count as them, from the inheriting holds, told to the
    /// domain as they change (`inheritingProcesses`).
    func updateInheritance() {
        let (added, removed) = lock.withLock { () -> (Set<Int32>, Set<Int32>) in
            let wanted = closed ? [] : Set(inheritingHolds.compactMap { holds[$0]?.holder })
            defer { inheritingProcesses = wanted }
            return (wanted.subtracting(inheritingProcesses), inheritingProcesses.subtracting(wanted))
        }
        for pid in added { server.domain.setInheriting(pid, true) }
        for pid in removed { server.domain.setInheriting(pid, false) }
    }

    /// Whether `ancestor` is a parent, grandparent, … of `pid`, and runs as `uid`.
    static func isAncestor(_ ancestor: Int32, of pid: Int32, sameUserAs uid: UInt32) -> Bool {
        var current = pid
        for _ in 0..<64 {
            guard let fields = ProcFile.statusFields(["PPid"], of: current),
                let parent = fields["PPid"].flatMap({ Int32($0) }), parent > 1
            else { return false }
            if parent == ancestor {
                // Uid: real, effective, saved, filesystem; the socket's credentials are effective.
                let ids = ProcFile.statusFields(["Uid"], of: parent)?["Uid"]?.split(separator: "\t") ?? []
                return uid == 0 || (ids.count > 1 && UInt32(ids[1]) == uid)
            }
            current = parent
        }
        return false
    }

    static func kind(_ intent: WireIntent) -> AccessKind? {
        let names = intent.options ?? []
        switch intent.access {
        case .read:
            var options = ReadingOptions()
            for name in names {
                // forUploading is the coordinator's own business (a snapshot it takes), not the server's.
                guard let option = ReadingOptions.named.first(where: { $0.1 == name && $0.0 != .forUploading })?.0
                else { return nil }
                options.insert(option)
            }
            return .reading(options)
        case .write:
            var options = WritingOptions()
            for name in names {
                guard let option = WritingOptions.named.first(where: { $0.1 == name })?.0 else { return nil }
                options.insert(option)
            }
            return options.isValid ? .writing(options) : nil
        }
    }

    /// The errno name a hold's failure is answered with: the engine's for its refusals.
    static func errnoName(_ failure: AccessFailure) -> String {
        ErrnoNames.name(of: failure.errno(cancellation: ECANCELED))
    }
}
