@testable import CoordinationCluster
import Foundation
import Synchronization
import Testing

/// A host's side of the cluster: which delegations it asks for, how a recall narrows them
/// around what its own programs still hold, and its answers to recalls — each host a
/// `ClusterMember` of its own in this process, with a stand-in for its local coordination,
/// against one etcd on loopback.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct ClusterMemberTests {
    /// A host's own coordination as the member sees it: holders set by the test, the other
    /// hosts' accesses it was asked to begin and end (and the requests they carried), and what
    /// it answers them (granted, unless the test says otherwise for a path). It tells the
    /// member of each change, as a host's coordination may (`LocalChanges`).
    final class Local: LocalAccesses {
        private struct State {
            var holders: [(String, Delegations.Mode)] = []
            var begun: [String] = []
            var ended: [String] = []
            var requests: [String] = []
            var answers: [String: LocalAnswer] = [:]
            var changed: (@Sendable () -> Void)?
            /// The accesses begun and not yet ended, in order, for `queuesBegunAccesses`.
            var open: [(number: Int, path: String, writes: Bool)] = []
            var opened = 0
        }
        private let state = Mutex(State())
        /// Whether an access begun here waits, as a host's engine makes it, while an earlier
        /// one of the same item that it conflicts with is begun and not ended.
        let queuesBegunAccesses: Bool

        init(queuesBegunAccesses: Bool = false) { self.queuesBegunAccesses = queuesBegunAccesses }

        func hold(_ path: String, _ mode: Delegations.Mode) { change { $0.holders.append((path, mode)) } }
        func end(_ path: String) { change { $0.holders.removeAll { $0.0 == path } } }
        /// What the accesses of `path` begun here are answered from now on.
        func answer(_ path: String, _ answer: LocalAnswer) { change { $0.answers[path] = answer } }

        private func change(_ body: (inout State) -> Void) {
            let changed = state.withLock { state in
                body(&state)
                return state.changed
            }
            changed?()
        }

        func observeChanges(_ changed: @escaping @Sendable () -> Void) -> LocalChanges {
            state.withLock { $0.changed = changed }
            return [.holders, .answers]
        }
        var begun: [String] { state.withLock { $0.begun } }
        var ended: [String] { state.withLock { $0.ended } }
        var requests: [String] { state.withLock { $0.requests } }

        func holders() -> [(path: String, mode: Delegations.Mode)] {
            state.withLock { $0.holders.map { ($0.0, $0.1) } }
        }

        func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess {
            let name = "\(wanted.host) \(wanted.mode.rawValue) \(wanted.path)"
            let writes = wanted.mode.writes
            let number = state.withLock { state in
                state.begun.append(name)
                state.requests.append(wanted.request)
                state.opened += 1
                state.open.append((state.opened, wanted.path, writes))
                return state.opened
            }
            let queues = queuesBegunAccesses
            return Access(answering: { [self] in
                state.withLock { state in
                    let behind = state.open.contains {
                        $0.number < number && $0.path == wanted.path && ($0.writes || writes)
                    }
                    return queues && behind ? .waiting : state.answers[wanted.path] ?? .granted
                }
            }) { [self] in
                change { state in
                    state.ended.append(name)
                    state.open.removeAll { $0.number == number }
                }
            }
        }

        struct Access: LocalAccess {
            let answering: @Sendable () -> LocalAnswer
            let ending: @Sendable () -> Void
            var answer: LocalAnswer { answering() }
            func end() { ending() }
        }
    }

    /// A member of store "s". Its delegations are kept until recalled unless `idleTime` is given:
    /// the tests that count keys do not race the sweep of idle ones.
    static func member(
        _ name: String, _ client: EtcdClient, _ local: Local = Local(), breakTime: Duration? = nil,
        ttl: Int64 = 5, idleTime: Duration? = nil
    ) async throws -> ClusterMember {
        let member = ClusterMember(
            join: {
                let lease = try await HostLease.grant(on: client, ttl: ttl)
                let delegations = Delegations(client: client, store: "s", host: name, lease: lease)
                try await delegations.start()
                return delegations
            }, local: local, breakTime: breakTime, idleTime: idleTime)
        try await member.start()
        return member
    }

    /// Whether `condition` holds within `seconds` (a host's replica follows etcd a moment later).
    static func eventually(seconds: Int = 1, _ condition: () -> Bool) async -> Bool {
        for _ in 0..<(seconds * 100) {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    /// Runs `body` with two hosts, A (whose local coordination the test sets) and B, on one etcd;
    /// both leave after it.
    static func withTwoHosts(
        breakTime: Duration? = nil,
        _ body: (_ a: ClusterMember, _ localA: Local, _ b: ClusterMember) async throws -> Void
    ) async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localA = Local()
        let a = try await Self.member("A", client, localA, breakTime: breakTime), b = try await Self.member("B", client)
        try await body(a, localA, b)
        await a.leave()
        await b.leave()
    }

    /// Keys in the store, as "host mode path".
    static func keys(_ member: ClusterMember) -> [String] {
        (member.currentDelegations?.entries() ?? []).map { "\($0.host) \($0.mode.rawValue) \($0.path)" }
    }

    @Test func aHostAloneTakesTheOutermostDirectoryAndGrantsBelowItInMemory() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.member("A", client)
        #expect(!a.covers("projects/film/scene.blend", .write))
        try await a.acquire("projects/film/scene.blend", .write)
        #expect(Self.keys(a) == ["A w projects"])
        #expect(a.covers("projects/film/scene.blend", .write) && a.covers("projects/other", .read))
        #expect(!a.covers("elsewhere", .read) && !a.covers("", .read), "nothing outside the directory")
        await a.leave()
    }

    /// A recall of a directory's delegation for an item nobody here holds is given back at
    /// once; the holders that go on keep a narrower delegation of their own.
    @Test func aRecallNarrowsTheDelegationAroundWhatGoesOn() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("a/b/c", .write)
            localA.hold("a/b/c", .write)
            #expect(Self.keys(a) == ["A w a"])
            try await b.acquire("a/d/e", .read)
            #expect(b.covers("a/d/e", .read))
            #expect(!a.covers("a/d/e", .write), "given back")
            #expect(a.covers("a/b/c", .write), "what A's program holds stays A's")
            #expect(await Self.eventually { Set(Self.keys(a)) == ["A w a/b", "B r a/d/e"] }, "\(Self.keys(a))")
            // (B asks for "a" first, and takes it back, when its replica has not seen A's key yet.)
            #expect(
                await Self.eventually { localA.begun.last == "B r a/d/e" && Set(localA.ended) == Set(localA.begun) },
                "A's presenters were asked for B's read, and told it ended: \(localA.begun) \(localA.ended)")
        }
    }

    /// Hosts making files side by side in one directory (writes in place of new files, as a
    /// mount's creates without O_TRUNC are) share the directory: once each has met the others
    /// there, each holds one key of the directory in that mode and makes the rest of its files
    /// without asking etcd. Another host's read inside recalls those keys, and a host keeps what
    /// its programs still hold under keys of the items.
    @Test func hostsMakingFilesSideBySideShareTheirDirectory() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localA = Local()
        var hosts: [(name: String, member: ClusterMember)] = []
        for (name, local) in [("A", localA), ("B", Local()), ("C", Local())] {
            hosts.append((name, try await Self.member(name, client, local)))
        }
        for round in 0..<4 {
            for (name, member) in hosts {
                try await member.acquire("made/\(name)-\(round)", .inPlace)
                #expect(member.covers("made/\(name)-\(round)", .inPlace))
            }
        }
        let a = hosts[0].member
        #expect(
            await Self.eventually(seconds: 5) {
                Set(Self.keys(a).filter { !$0.hasSuffix("-0") && !$0.hasSuffix("-1") })
                    == ["A s made", "B s made", "C s made"]
            }, "\(Self.keys(a))")
        for (name, member) in hosts {
            #expect(member.covers("made/\(name)-next", .inPlace), "\(name) makes its next file in memory")
            #expect(!member.covers("made/\(name)-next", .write), "a writer in place only")
        }
        // C reads one of A's files while A's program still writes another.
        localA.hold("made/A-3", .inPlace)
        try await hosts[2].member.acquire("made/A-2", .read)
        #expect(hosts[2].member.covers("made/A-2", .read))
        #expect(!a.covers("made/A-next", .inPlace), "A gave the directory back")
        #expect(a.covers("made/A-3", .inPlace), "what A's program holds stays A's")
        localA.end("made/A-3")
        for (_, member) in hosts { await member.leave() }
    }

    /// A deletion (or move, or replacement) of an item another host has anything in or around
    /// asks for the item itself, and the host it recalls begins the access as that deletion: its
    /// presenters of the item and of everything inside it are asked as for a deletion of its
    /// own. Its delegation serves other writes and reads of the item like a write's.
    @Test func aDeletionRecallsAsADeletionOfTheItemItself() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquirePresence("docs/folder/report")
            // B's replica must have seen A's presence first; before, B asks for all of "docs"
            // (nobody else there, as far as it knows) and takes that back once it does.
            #expect(await Self.eventually { Self.keys(b).contains("A p docs/folder/report") }, "\(Self.keys(b))")
            try await b.acquire("docs/folder", .deleting)
            #expect(Self.keys(b).contains("B d docs/folder"), "\(Self.keys(b))")
            #expect(b.covers("docs/folder/report", .write) && b.covers("docs/folder", .read))
            #expect(!b.covers("docs/other", .read), "nothing beside the item")
            #expect(await Self.eventually { localA.begun == ["B d docs/folder"] }, "\(localA.begun)")
            // Where nobody else has anything, a write of the directory serves: nobody to ask.
            try await b.acquire("elsewhere/old", .moving)
            #expect(Self.keys(b).contains("B w elsewhere") && b.covers("elsewhere/new", .replacing), "\(Self.keys(b))")
        }
    }

    /// A host that asked for a whole directory on a replica that had not seen the other
    /// host's key takes its request back; the holder keeps its delegation, and its presenters
    /// are not asked about an access that never comes.
    @Test func aRequestTakenBackLeavesTheHolderItsDelegation() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("a/b/c", .write)
            localA.hold("a/b/c", .write)
            let bDelegations = try #require(b.currentDelegations)
            let taken = try await bDelegations.acquireUnlessBlocked("a", .read)
            #expect(taken == nil, "A's write of the directory is in the way")
            try await Task.sleep(for: .milliseconds(500))  // a recall comes within milliseconds
            #expect(localA.begun.isEmpty, "A was recalled for a request that never waits: \(localA.begun)")
            #expect(a.covers("a/x", .write), "A keeps the directory")
            #expect(Self.keys(a) == ["A w a"])
            // B asks for the item alone then; A narrows its delegation around what it holds.
            try await b.acquire("a/d/e", .read)
            #expect(b.covers("a/d/e", .read) && !b.covers("a/d", .read))
        }
    }

    /// An O_NONBLOCK request waits for a host that holds the item idle to give it back (tar on
    /// one host of files another made failed EAGAIN).
    @Test func aNonBlockingOpenIsGrantedWhatAnotherHostHoldsIdle() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            #expect(try await b.acquireAtOnce("doc", .read), "A gave back a delegation none of its programs used")
            #expect(b.covers("doc", .read) && !a.covers("doc", .write))
        }
    }

    /// Where a program of the other host holds the item, an O_NONBLOCK request fails at once: that
    /// host refuses it (the request does not wait out its patience), keeps its delegation, and
    /// asks its presenters nothing about an access that never comes.
    @Test func aNonBlockingOpenIsRefusedWhereAProgramHoldsTheItem() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let started = ContinuousClock.now
            #expect(try await b.acquireAtOnce("doc", .read) == false, "A's program writes it")
            let waited = ContinuousClock.now - started
            #expect(waited < .milliseconds(800), "refused by A, not given up on after \(waited)")
            #expect(
                await Self.eventually { a.covers("doc", .write) && Self.keys(a) == ["A w doc"] },
                "A keeps it: \(Self.keys(a))")
            #expect(localA.begun.isEmpty, "A's presenters were asked about a read that never came: \(localA.begun)")
            localA.end("doc")
            #expect(try await b.acquireAtOnce("doc", .read), "granted once the program is done")
        }
    }

    /// A recall does not take the item from the holder it waits for: that holder's accessors
    /// (the processes of a `coordfs coordinate` hold) are still granted from the recalled
    /// delegation until the holder ends, and nobody else is. (Their own write waited for the
    /// recall, which waited for their hold: both until the break time.)
    @Test func aRecalledDelegationStillCoversTheAccessorsOfTheHolderItWaitsFor() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let reader = Task { _ = try await b.acquire("doc", .read) }
            #expect(await Self.eventually { localA.begun == ["B r doc"] }, "A is recalled")
            #expect(!a.covers("doc", .read), "nothing new is granted under a recalled delegation")
            #expect(a.coversAccessor("doc", .write) && a.coversAccessor("doc", .read), "the holder's own work goes on")
            #expect(!a.coversAccessor("other", .read), "only under the recalled delegation")
            try await Task.sleep(for: .milliseconds(300))
            #expect(!b.covers("doc", .read), "B read while A's holder wrote")
            localA.end("doc")
            try await reader.value
            #expect(!a.coversAccessor("doc", .read), "given back: the accessors ask as anyone does")
        }
    }

    /// A request that gives up (interrupted, past its wait timeout) takes its key back: the
    /// holder, recalled for it, keeps its delegation.
    @Test func aRequestThatGivesUpTakesItsKeyBack() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let reader = Task { _ = try await b.acquire("doc", .read) }
            #expect(await Self.eventually { localA.begun == ["B r doc"] }, "A is recalled")
            reader.cancel()
            await #expect(throws: Delegations.Failure.withdrawn) { try await reader.value }
            #expect(await Self.eventually { localA.ended == ["B r doc"] && a.covers("doc", .write) }, "A keeps it")
            #expect(await Self.eventually { Self.keys(a) == ["A w doc"] }, "\(Self.keys(a))")
        }
    }

    /// A holder here that conflicts with the other host's access keeps the recall waiting
    /// until it ends.
    @Test func aRecallWaitsForAConflictingHolder() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let reader = Task { _ = try await b.acquire("doc", .read) }
            try await Task.sleep(for: .milliseconds(700))
            #expect(!b.covers("doc", .read), "B read while A's program wrote")
            #expect(localA.begun == ["B r doc"], "A's presenters are asked while B waits")
            localA.end("doc")
            try await reader.value
            #expect(b.covers("doc", .read) && !a.covers("doc", .read))
            #expect(await Self.eventually { localA.ended == ["B r doc"] })
        }
    }

    /// A holder that never ends is broken after the break time.
    @Test func aRecallIsBrokenAfterTheBreakTime() async throws {
        try await Self.withTwoHosts(breakTime: .seconds(1)) { a, localA, b in
            try await a.acquire("log", .write)
            localA.hold("log", .write)
            let started = ContinuousClock.now
            try await b.acquire("log", .write)
            let waited = ContinuousClock.now - started
            #expect(waited >= .milliseconds(900), "B waited \(waited)")
            #expect(!a.covers("log", .read))
            #expect(!a.coversAccessor("log", .write), "a broken holder's accessors ask as anyone does")
        }
    }

    /// A delegation nothing here uses is given back after the idle time (between one and two),
    /// asked by nobody: keys do not pile up. One a holder is inside, one granted from all along,
    /// and a presence stay; the one given back grants nothing more, and is asked for again as
    /// any other.
    @Test func anIdleDelegationIsGivenBackAndOneInUseIsKept() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localA = Local()
        let a = try await Self.member("A", client, localA, idleTime: .milliseconds(300))
        try await a.acquire("held/file", .write)
        localA.hold("held/file", .write)
        try await a.acquire("used/file", .write)
        try await a.acquire("idle/file", .read)
        try await a.acquirePresence("presented/file")
        #expect(Set(Self.keys(a)) == ["A w held", "A w used", "A r idle", "A p presented/file"], "\(Self.keys(a))")
        var idleGone = false
        for _ in 0..<150 where !idleGone {  // 3 s at most; it goes within 0.6 s
            #expect(a.covers("used/other", .write))
            try await Task.sleep(for: .milliseconds(20))
            idleGone = !Self.keys(a).contains("A r idle")
        }
        #expect(idleGone, "\(Self.keys(a))")
        #expect(!a.covers("idle/file", .read), "nothing is granted from a delegation given back")
        #expect(Set(Self.keys(a)) == ["A w held", "A w used", "A p presented/file"], "\(Self.keys(a))")
        try await a.acquire("idle/file", .read)
        #expect(a.covers("idle/file", .read), "asked for again")
        localA.end("held/file")
        #expect(
            await Self.eventually(seconds: 3) { !Self.keys(a).contains("A w held") },
            "given back once its holder is gone")
        await a.leave()
    }

    /// Where hosts meet, each takes a delegation per item (one key per file created in a
    /// directory both use); given back once idle, and a host alone again takes the whole
    /// directory with its next request.
    @Test func fineDelegationsGoWhenIdleAndAHostAloneTakesTheDirectoryAgain() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localB = Local()
        let a = try await Self.member("A", client, idleTime: .milliseconds(500))
        let b = try await Self.member("B", client, localB, idleTime: .milliseconds(500))
        try await b.acquire("shared/b", .write)
        localB.hold("shared/b", .write)
        #expect(
            await Self.eventually { Self.keys(a).contains("B w shared") },
            "B alone takes the directory: \(Self.keys(a))")
        for name in ["a0", "a1", "a2"] { try await a.acquire("shared/\(name)", .write) }
        #expect(
            await Self.eventually {
                Set(Self.keys(a)) == ["B w shared/b", "A w shared/a0", "A w shared/a1", "A w shared/a2"]
            },
            "where they meet, an item each: \(Self.keys(a))")
        localB.end("shared/b")
        #expect(await Self.eventually(seconds: 5) { Self.keys(a).isEmpty }, "given back once idle: \(Self.keys(a))")
        try await a.acquire("shared/a3", .write)
        #expect(Self.keys(a) == ["A w shared"], "alone again: the directory")
        await a.leave()
        await b.leave()
    }

    /// A recall of a directory's delegation is honoured while this host's own requests inside it
    /// keep coming (creates of new files, granted in memory until then): from the recall on,
    /// nothing more is granted from it, the other host's request is granted within a few of
    /// etcd's round trips, not once the requests here stop, and the creates here go on, each
    /// with a delegation of its own item.
    @Test func aRecallIsHonouredWhileThisHostsOwnRequestsKeepComing() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("shared/a0", .inPlace)
            #expect(Self.keys(a) == ["A w shared"])
            let made = Atomic<Int>(0)
            // A's creates, as a mount makes them: the claim, then the delegation when not covered.
            let creating = Task {
                while !Task.isCancelled {
                    let path = "shared/a\(made.load(ordering: .relaxed) + 1)"
                    localA.hold(path, .inPlace)
                    let covered = a.covers(path, .inPlace)
                    localA.end(path)
                    if covered {
                        made.add(1, ordering: .relaxed)
                        await Task.yield()
                    } else {
                        try await a.acquire(path, .inPlace)
                    }
                }
            }
            let asked = ContinuousClock.now
            try await b.acquire("shared/b0", .inPlace)
            let waited = ContinuousClock.now - asked
            let madeThen = made.load(ordering: .relaxed)
            #expect(b.covers("shared/b0", .inPlace))
            #expect(waited < .seconds(2), "B waited \(waited) while A's creates went on")
            #expect(
                await Self.eventually { made.load(ordering: .relaxed) > madeThen + 2 },
                "A's creates went on under delegations of their own items")
            creating.cancel()
            _ = await creating.result
            #expect(await Self.eventually { !Self.keys(a).contains("A w shared") }, "\(Self.keys(a))")
        }
    }

    /// Two other hosts' writes recall one delegation at once: the holder meets the earlier
    /// here and gives the delegation back once it is granted; the later waits for the earlier's
    /// host, in the store's order. (Met here both, the later waited for the earlier's access
    /// begun here, which lasts until the delegation goes: every host stood still until the
    /// break time.)
    @Test func twoHostsRecallingOneDelegationAtOnceAreServedInTurn() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localA = Local(queuesBegunAccesses: true)
        let a = try await Self.member("A", client, localA, breakTime: .seconds(20))
        let b = try await Self.member("B", client, Local(queuesBegunAccesses: true), breakTime: .seconds(20))
        let c = try await Self.member("C", client, Local(queuesBegunAccesses: true), breakTime: .seconds(20))
        try await a.acquire("doc", .write)
        // A's presenters take their time: both requests reach A before it may let either go.
        localA.answer("doc", .waiting)
        async let byB: Void = { _ = try await b.acquire("doc", .write) }()
        async let byC: Void = { _ = try await c.acquire("doc", .write) }()
        #expect(await Self.eventually(seconds: 5) { Set(Self.keys(a)).isSuperset(of: ["B w doc", "C w doc"]) })
        try await Task.sleep(for: .milliseconds(300))
        #expect(localA.begun.count == 1, "A met both at once: \(localA.begun)")
        let answered = ContinuousClock.now
        localA.answer("doc", .granted)
        _ = try await (byB, byC)
        let waited = ContinuousClock.now - answered
        #expect(waited < .seconds(5), "two writers from other hosts waited \(waited) (break time 20 s)")
        #expect(!a.covers("doc", .read))
        for member in [a, b, c] { await member.leave() }
    }

    /// Three hosts' writers take turns at one item as a mount's do (the claim here first, then
    /// the delegation if not covered): never two at once. (A recall the replica made of a key
    /// just given back, before it saw the key go, once made the host grant from it again with
    /// no key in the store, and two hosts wrote at once.)
    @Test func threeHostsWritersTakeTurnsAtOneItem() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let names = ["A", "B", "C"]
        var hosts: [(member: ClusterMember, local: Local)] = []
        for name in names {
            let local = Local(queuesBegunAccesses: true)
            hosts.append((try await Self.member(name, client, local, breakTime: .seconds(20)), local))
        }
        final class Tally: Sendable {
            let inside = Atomic<Int>(0), overlaps = Atomic<Int>(0), turns = Atomic<Int>(0)
        }
        let tally = Tally()
        let ends = ContinuousClock.now + .seconds(6)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (member, local) in hosts {
                group.addTask {
                    while ContinuousClock.now < ends {
                        local.hold("doc", .write)
                        guard member.covers("doc", .write) else {
                            local.end("doc")
                            // Withdrawn under its waiters again and again: asked for once more.
                            do { try await member.acquire("doc", .write) } catch Delegations.Failure.withdrawn {}
                            continue
                        }
                        if tally.inside.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
                            tally.overlaps.add(1, ordering: .relaxed)
                        }
                        try await Task.sleep(for: .milliseconds(2))
                        tally.inside.subtract(1, ordering: .sequentiallyConsistent)
                        tally.turns.add(1, ordering: .relaxed)
                        local.end("doc")
                        try await Task.sleep(for: .milliseconds(Int.random(in: 0...5)))
                    }
                }
            }
            try await group.waitForAll()
        }
        let overlaps = tally.overlaps.load(ordering: .relaxed), turns = tally.turns.load(ordering: .relaxed)
        #expect(overlaps == 0, "\(overlaps) overlapping turns of \(turns)")
        #expect(turns > 30, "\(turns) turns in 6 s")
        for (member, _) in hosts { await member.leave() }
    }

    /// Three hosts whose writers want one item all the time: each grant is recalled as it
    /// comes (the other two hosts' requests are queued behind it), and is still the request's
    /// that waited for it: the request takes its claim and finds itself covered before the
    /// recall hands the item on (`GrantPromise`). Without that, a host handed each grant on
    /// before its request could use it, and the request, asking again behind the others, ended
    /// "withdrawn" (ENOLCK) after sixteen rounds.
    @Test func aGrantRecalledAsItComesServesTheRequestThatWaitedForIt() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        var hosts: [(member: ClusterMember, local: Local)] = []
        for name in ["A", "B", "C"] {
            let local = Local(queuesBegunAccesses: true)
            hosts.append((try await Self.member(name, client, local, breakTime: .seconds(20)), local))
        }
        final class Tally: Sendable {
            let inside = Atomic<Int>(0), overlaps = Atomic<Int>(0), promised = Atomic<Int>(0)
            let uncovered = Atomic<Int>(0), withdrawn = Atomic<Int>(0)
            let turns = Mutex<[Int]>([0, 0, 0])
        }
        let tally = Tally()
        let ends = ContinuousClock.now + .seconds(6)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, (member, local)) in hosts.enumerated() {
                group.addTask {
                    while ContinuousClock.now < ends {
                        // As a mount: the claim here, then the delegation if it is not covered;
                        // granted after a wait, the claim is taken again and looked at.
                        local.hold("doc", .write)
                        if !member.covers("doc", .write) {
                            local.end("doc")
                            let promise: GrantPromise?
                            do { promise = try await member.acquire("doc", .write) } catch Delegations.Failure.withdrawn
                            {
                                tally.withdrawn.add(1, ordering: .relaxed)
                                continue
                            }
                            local.hold("doc", .write)
                            let covered = member.covers("doc", .write)
                            if promise != nil {
                                tally.promised.add(1, ordering: .relaxed)
                                if !covered { tally.uncovered.add(1, ordering: .relaxed) }
                            }
                            promise?.redeem()
                            if !covered {
                                local.end("doc")
                                continue
                            }
                        }
                        if tally.inside.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
                            tally.overlaps.add(1, ordering: .relaxed)
                        }
                        try await Task.sleep(for: .milliseconds(2))
                        tally.inside.subtract(1, ordering: .sequentiallyConsistent)
                        tally.turns.withLock { $0[index] += 1 }
                        local.end("doc")
                    }
                }
            }
            try await group.waitForAll()
        }
        let turns = tally.turns.withLock { $0 }, promised = tally.promised.load(ordering: .relaxed)
        #expect(tally.overlaps.load(ordering: .relaxed) == 0, "overlapping turns; turns \(turns)")
        #expect(tally.withdrawn.load(ordering: .relaxed) == 0, "requests withdrawn; turns \(turns)")
        #expect(promised > 30, "\(promised) grants after a wait in 6 s; turns \(turns)")
        #expect(tally.uncovered.load(ordering: .relaxed) == 0, "grants handed on before their requests used them")
        #expect(turns.allSatisfy { $0 > 10 }, "a host starved: turns \(turns)")
        for (member, _) in hosts { await member.leave() }
    }

    /// A host told to coordinate alone when etcd is gone does so, loudly, once its lease is
    /// lost, and stops once it has joined again.
    @Test func aHostMayCoordinateAloneWhileEtcdIsGone() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let member = ClusterMember(
            join: {
                let lease = try await HostLease.grant(on: client, ttl: 2)
                let delegations = Delegations(client: client, store: "s", host: "A", lease: lease)
                try await delegations.start()
                return delegations
            }, local: Local(), breakTime: nil, whenUnreachable: .local)
        try await member.start()
        #expect(!member.covers("x", .write))
        servers.kill(0)
        #expect(
            await Self.eventually(seconds: 8) { member.isAlone && member.covers("x", .write) },
            "alone once the lease is lost")
        try servers.start(0)
        #expect(await Self.eventually(seconds: 20) { !member.isAlone }, "joined again")
        #expect(!member.covers("x", .write), "and asks the cluster again")
        try await member.acquire("x", .write)
        #expect(member.covers("x", .write))
        await member.leave()
    }

    /// A host whose lease is lost grants nothing, then joins again with a new lease.
    @Test func aLostLeaseEndsEveryGrantAndTheHostJoinsAgain() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.member("A", client, ttl: 2)
        try await a.acquire("x", .write)
        let first = try #require(a.currentDelegations)
        first.lease.stopRenewing()
        await first.lease.waitUntilLost()
        #expect(!a.covers("x", .read), "a lost lease grants nothing")
        var rejoined = false
        for _ in 0..<50 where !rejoined {
            try await Task.sleep(for: .milliseconds(100))
            rejoined = a.currentDelegations.map { $0 !== first } ?? false
        }
        #expect(rejoined, "the host joined again")
        try await a.acquire("x", .write)
        #expect(a.covers("x", .write))
        await a.leave()
    }

    // MARK: Fencing writes through open files

    /// Whether `a` has joined again after losing `first`'s lease, and asked again for what its
    /// programs hold.
    static func rejoined(_ a: ClusterMember, after first: Delegations) -> Bool {
        a.currentDelegations.map { $0 !== first } == true && a.standing.lease == .held
    }

    /// A write open is admitted while the lease may be valid and nothing took its item away;
    /// once the lease is counted lost none of its writes lands, and status says so.
    @Test func writesThroughAnOpenFileStopOnceTheLeaseMayHaveEnded() async throws {
        try await Self.withTwoHosts { a, localA, _ in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let stamp = try #require(a.stampWrites("doc"), "the open's writes are covered")
            #expect(a.mayAdmitWrites && a.lastCoverLoss <= stamp, "no loss since: no lock taken to admit a write")
            #expect(a.admitsWrites("doc", since: stamp) == .admitted(through: stamp))
            #expect(a.standing.lease == .held && a.standing.validFor.map { $0 > .seconds(3) } == true, "\(a.standing)")
            #expect(a.stampWrites("elsewhere") == nil, "a write nothing here covers is fenced from the start")
            // Reads are stamped where a delegation here serves them; elsewhere (a read another
            // host let past its programs) they hold nothing to lose.
            #expect(a.stampReads("doc") == stamp && a.stampReads("elsewhere") == nil)
            let first = try #require(a.currentDelegations)
            first.lease.loseLocally()
            #expect(!a.mayAdmitWrites, "the lease counted lost: no write lands, before its loss is handled")
            #expect(a.admitsWrites("doc", since: stamp) == .suspended)
            #expect(await Self.eventually(seconds: 10) { Self.rejoined(a, after: first) }, "\(a.standing)")
            #expect(a.standing.leasesLost == 1 && a.standing.lostFor == nil, "\(a.standing)")
        }
    }

    /// A host that counted its lease lost while etcd still had it (cut off for less than its
    /// TTL) asks again for the items its programs hold first, while its lost keys still keep
    /// its place in line, and only then revokes the lost lease: nobody came in between, so the
    /// items were its own all along, and writes through the files open on them go on. The
    /// other host still waits for those programs.
    @Test func aLeaseLostWhileEtcdKeptItCarriesTheOpenFilesOver() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            let stamp = try #require(a.stampWrites("doc"))
            let first = try #require(a.currentDelegations)
            first.lease.loseLocally()
            #expect(await Self.eventually(seconds: 10) { Self.rejoined(a, after: first) }, "\(a.standing)")
            #expect(a.mayAdmitWrites)
            guard case .admitted(let through) = a.admitsWrites("doc", since: stamp) else {
                Issue.record("the open's writes were fenced: \(a.admitsWrites("doc", since: stamp)), \(Self.keys(a))")
                return
            }
            #expect(through == a.lastCoverLoss && through > stamp, "judged past the lost lease")
            #expect(a.standing.fencedOpens == 0)
            #expect(
                await Self.eventually { a.covers("doc", .write) && Self.keys(a) == ["A w doc"] },
                "asked for again: \(Self.keys(a))")
            let reader = Task { _ = try await b.acquire("doc", .read) }
            try await Task.sleep(for: .milliseconds(500))
            #expect(!b.covers("doc", .read), "B read while A's program held the file")
            localA.end("doc")
            try await reader.value
        }
    }

    /// A host whose lease etcd ended (a host cut off past its TTL finds it so) cannot know what
    /// the other hosts did meanwhile: writes through the files its programs kept open are
    /// fenced for good. It still asks again for their items before it grants anything new, so
    /// the other hosts wait for those programs as for any holder (after a partition healed,
    /// another host's `cat` and `echo >` went ahead while the program kept the file open).
    @Test func aLeaseThatEndedInEtcdFencesTheOpenFilesButStillHoldsTheirItems() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            try await a.acquire("notes", .read)
            localA.hold("notes", .read)
            let stamp = try #require(a.stampWrites("doc"))
            let first = try #require(a.currentDelegations)
            // As etcd expires it: its keys go at once.
            try await first.client.revoke(first.lease.id)
            #expect(await Self.eventually(seconds: 10) { Self.rejoined(a, after: first) }, "\(a.standing)")
            #expect(a.mayAdmitWrites, "new opens' writes land")
            // A hold's cover judged at its end (a control client's release) is no open fenced.
            #expect(a.admitsWrites("doc", since: stamp, ofAnOpenFile: false) == .fenced)
            #expect(a.standing.fencedOpens == 0, "\(a.standing)")
            #expect(a.admitsWrites("doc", since: stamp) == .fenced, "another host may have written it meanwhile")
            #expect(a.standing.fencedOpens == 1 && a.standing.leasesLost == 1, "\(a.standing)")
            #expect(a.admitsWrites("doc", since: stamp) == .fenced, "for good")
            #expect(
                await Self.eventually { Set(Self.keys(a)) == ["A w doc", "A r notes"] },
                "asked for again: \(Self.keys(a))")
            let newStamp = try #require(a.stampWrites("doc"), "a new open of it is covered")
            #expect(a.admitsWrites("doc", since: newStamp) == .admitted(through: newStamp))
            let writer = Task { _ = try await b.acquire("notes", .write) }
            let reader = Task { _ = try await b.acquire("doc", .read) }
            try await Task.sleep(for: .milliseconds(500))
            #expect(!b.covers("doc", .read) && !b.covers("notes", .write), "B went ahead of A's programs")
            localA.end("doc")
            localA.end("notes")
            try await reader.value
            try await writer.value
        }
    }

    /// A recall broken at the break time fences the writes of the holders it went past, and of
    /// them only: a write open of another item goes on.
    @Test func aRecallBrokenAtTheBreakTimeFencesTheHoldersItWentPast() async throws {
        try await Self.withTwoHosts(breakTime: .seconds(1)) { a, localA, b in
            try await a.acquire("log", .write)
            localA.hold("log", .write)
            try await a.acquire("other", .write)
            localA.hold("other", .write)
            let log = try #require(a.stampWrites("log")), other = try #require(a.stampWrites("other"))
            try await b.acquire("log", .write)
            #expect(a.lastCoverLoss > log, "a loss of cover was recorded")
            #expect(a.admitsWrites("log", since: log) == .fenced, "B writes it now")
            #expect(a.admitsWrites("other", since: other) == .admitted(through: a.lastCoverLoss))
        }
    }

    /// An item another host has any key of (a presence too) is one whose access may come while
    /// it is open here: the kernel must not serve its writes (no passthrough).
    @Test func anItemAnotherHostIsInterestedInIsKnown() async throws {
        try await Self.withTwoHosts { a, _, b in
            #expect(!a.othersInterested(in: "docs/report"), "a host alone")
            try await b.acquirePresence("docs/report")
            #expect(await Self.eventually { a.othersInterested(in: "docs/report") })
            #expect(a.othersInterested(in: "docs"), "a directory around it")
            #expect(a.othersInterested(in: "docs/report/inside"), "inside it")
            #expect(!a.othersInterested(in: "docs/other"), "beside it")
        }
    }

    // MARK: The same sharing policy on every host

    /// An appender here shares its item with another host's reader, as on one host: the
    /// reader is granted at once; the appender keeps a delegation of its own that shares the
    /// item (`a`), beside the reader's (`r`), and its request reached this host as it was asked.
    @Test func anAppenderHereSharesItsItemWithAnotherHostsReader() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("log", .write)
            localA.hold("log", .appending)
            let started = ContinuousClock.now
            try await b.acquire("log", .read, request: "r10000")
            let waited = ContinuousClock.now - started
            #expect(waited < .seconds(2), "B's reader waited \(waited) for A's appender")
            #expect(b.covers("log", .read))
            #expect(a.covers("log", .appending) && !a.covers("log", .read), "A keeps what its appender needs, no more")
            #expect(await Self.eventually { Set(Self.keys(a)) == ["A a log", "B r log"] }, "\(Self.keys(a))")
            #expect(localA.requests == ["r10000"], "\(localA.requests)")
        }
    }

    /// Writers in place share an item across hosts, and a reader still waits for them.
    @Test func writersInPlaceShareAcrossHostsAndAReaderWaitsForThem() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("db", .write)
            localA.hold("db", .inPlace)
            try await b.acquire("db", .inPlace)
            #expect(b.covers("db", .inPlace) && b.covers("db", .appending) && !b.covers("db", .read))
            #expect(await Self.eventually { Set(Self.keys(a)) == ["A s db", "B s db"] }, "\(Self.keys(a))")
            // Beside a writer in place here, another host's reader waits (until it settles,
            // which this host's coordination tells: `aRequestLetPastHereLeavesThisHostItsDelegation`).
            try await a.acquire("wal", .write)
            localA.hold("wal", .inPlace)
            let reader = Task { _ = try await b.acquire("wal", .read) }
            try await Task.sleep(for: .milliseconds(500))
            #expect(!b.covers("wal", .read), "B's reader went ahead beside A's writer in place")
            localA.end("wal")
            try await reader.value
            #expect(b.covers("wal", .read))
        }
    }

    /// A request this host lets past its holders (a settled writer) is answered on its own key:
    /// the other host's request ends, holding nothing there, and this host keeps its delegation
    /// and its holder is not broken.
    @Test func aRequestLetPastHereLeavesThisHostItsDelegation() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .inPlace)
            localA.answer("doc", .passed)
            await #expect(throws: Delegations.Failure.answered(.passed)) { try await b.acquire("doc", .read) }
            #expect(!b.covers("doc", .read), "passed, B holds nothing")
            #expect(await Self.eventually { Self.keys(a) == ["A w doc"] }, "B's key is gone: \(Self.keys(a))")
            #expect(await Self.eventually { a.covers("doc", .write) }, "A keeps its delegation")
            #expect(await Self.eventually { localA.ended == ["B r doc"] })
        }
    }

    /// A request this host refuses (a presenter's refusal here) fails there with the errno,
    /// and this host keeps its delegation.
    @Test func aRequestRefusedHereFailsThereWithItsErrno() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.answer("doc", .refused("EACCES"))
            let started = ContinuousClock.now
            await #expect(throws: Delegations.Failure.answered(.refused("EACCES"))) {
                try await b.acquire("doc", .inPlace, request: "w20000")
            }
            #expect(ContinuousClock.now - started < .seconds(2), "refused at once, not at the break time")
            #expect(await Self.eventually { Self.keys(a) == ["A w doc"] && a.covers("doc", .write) }, "\(Self.keys(a))")
            #expect(localA.requests == ["w20000"])
        }
    }

    /// A read asks the other host's presenters of its item whatever that host holds: through
    /// its presence, which stays its own, and without waiting for its holders (the read's own
    /// delegation does that). A refusal there refuses the read.
    @Test func aReadAsksAnotherHostsPresentersWhateverThatHostHolds() async throws {
        try await Self.withTwoHosts { a, localA, b in
            try await a.acquire("doc", .write)
            localA.hold("doc", .write)
            try await a.acquirePresence("doc")
            #expect(a.holdsPresence("doc"), "a presence of its own, under a write of the item")
            #expect(await Self.eventually { b.othersPresent(at: "doc") && !b.othersPresent(at: "other") })
            let started = ContinuousClock.now
            try await b.askPresenters(of: "doc", request: "r10000")
            #expect(ContinuousClock.now - started < .seconds(2), "the question waited for A's writer")
            #expect(localA.begun == ["B q doc"] && localA.requests == ["r10000"], "\(localA.begun)")
            #expect(a.holdsPresence("doc") && a.covers("doc", .write), "A gave nothing back")
            #expect(
                await Self.eventually { Set(Self.keys(a)) == ["A w doc", "A p doc"] },
                "the question is gone: \(Self.keys(a))")
            localA.answer("doc", .refused("EACCES"))
            await #expect(throws: Delegations.Failure.answered(.refused("EACCES"))) {
                try await b.askPresenters(of: "doc", request: "r10000")
            }
            try await b.askPresenters(of: "other", request: "r10000")  // nobody presents it: at once
            #expect(localA.begun == ["B q doc", "B q doc"])
        }
    }
}
