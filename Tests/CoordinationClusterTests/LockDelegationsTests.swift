@testable import CoordinationCluster
import Foundation
import Synchronization
import Testing

/// Files' lock delegations between hosts (a mount with `--cluster` serves flock and fcntl locks
/// under them): `ClusterMember`s of the `.locks` role over keys of their own, each with a
/// stand-in for its host's lock table, against one etcd on loopback.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct LockDelegationsTests {
    /// A host's lock table as the member sees it: the files its programs hold locks of, set whole
    /// by the test (a downgrade is one change, not an unlock and a lock).
    final class Holders: LocalAccesses {
        private let held = Mutex<[(String, Delegations.Mode)]>([])

        func set(_ holders: [(String, Delegations.Mode)]) { held.withLock { $0 = holders } }

        func holders() -> [(path: String, mode: Delegations.Mode)] { held.withLock { $0.map { ($0.0, $0.1) } } }

        func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess { Nothing() }

        struct Nothing: LocalAccess {
            func end() {}
        }
    }

    /// Whether a host is alive: a dead one's member cannot join again (as a host whose daemon
    /// was killed), where a live one whose lease was lost joins again by itself.
    final class Life: Sendable {
        private let dead = Mutex(false)
        var isDead: Bool { dead.withLock { $0 } }
        func die() { dead.withLock { $0 = true } }
    }

    struct Dead: Error {}

    /// `name`'s member for locks in store "s", joining as a mount does: a lease of its own, the
    /// lock keys, no host record (its accesses' member records the host). Once `life` has
    /// died, it cannot join again.
    static func lockMember(
        _ name: String, _ client: EtcdClient, _ holders: Holders = Holders(), ttl: Int64 = 5,
        life: Life = Life()
    ) async throws -> ClusterMember {
        let member = ClusterMember(
            join: {
                if life.isDead { throw Dead() }
                let lease = try await HostLease.grant(on: client, ttl: ttl)
                let delegations = Delegations(client: client, store: "s", host: name, lease: lease, space: .locks)
                try await delegations.start(recording: false)
                return delegations
            }, local: holders, breakTime: nil, idleTime: nil, role: .locks)
        try await member.start()
        return member
    }

    /// Whether `acquiring` (an acquire under way) is granted within `seconds`, as `covered`
    /// tells; one that is not is cancelled, so that a failing test ends rather than hang the run.
    static func granted(_ acquiring: Task<Void, Error>, within seconds: Int, _ covered: () -> Bool) async -> Bool {
        let granted = await ClusterMemberTests.eventually(seconds: seconds, covered)
        if !granted { acquiring.cancel() }
        _ = try? await acquiring.value
        return granted
    }

    /// Keys in the member's key space, as "host mode path".
    static func keys(_ member: ClusterMember) -> [String] {
        (member.currentDelegations?.entries() ?? []).map { "\($0.host) \($0.mode.rawValue) \($0.path)" }
    }

    /// A file's lock delegation and an access delegation of it never meet: a host that writes
    /// the file does not hold off another's lock of it. A host's lock member joins beside its
    /// accesses' member under the same name (it records no host of its own).
    @Test func lockKeysLiveApartFromTheAccessesKeys() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let accessesA = try await ClusterMemberTests.member("A", client)
        let locksA = try await Self.lockMember("A", client)
        let locksB = try await Self.lockMember("B", client)
        try await accessesA.acquire("dir/file", .write)
        try await locksB.acquire("dir/file", .write)
        #expect(locksB.covers("dir/file", .write) && accessesA.covers("dir/file", .write))
        #expect(Self.keys(locksB) == ["B w dir"], "a host alone in the lock keys takes the directory")
        #expect(ClusterMemberTests.keys(accessesA) == ["A w dir"])
        #expect(locksA.currentDelegations?.space == .locks && accessesA.currentDelegations?.space == .delegations)
        await accessesA.leave()
        await locksA.leave()
        await locksB.leave()
    }

    /// Another host's lock request recalls the delegation; the recall waits for as long as a
    /// program here holds a conflicting lock (locks are never broken), keeps the delegation for
    /// that holder meanwhile, and says so to a holder that would queue behind it. A holder that
    /// narrows its lock to a shared one lets a shared request in, under a delegation of its own.
    @Test func aRecallWaitsForTheHoldersLocksAndKeepsTheDelegationForThem() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let holdersA = Holders()
        let a = try await Self.lockMember("A", client, holdersA), b = try await Self.lockMember("B", client)
        try await a.acquire("dir/file", .write)
        holdersA.set([("dir/file", .write)])
        let reader = Task { _ = try await b.acquire("dir/file", .read) }
        #expect(await ClusterMemberTests.eventually { !a.covers("dir/file", .read) }, "A is recalled")
        #expect(a.coversAccessor("dir/file", .write), "its holder's locks go on under it")
        #expect(a.recallWaits(for: "dir/file", .write), "the recall waits for a writer of the file")
        #expect(!a.recallWaits(for: "dir/file", .read), "not for a reader: B only reads")
        #expect(!a.recallWaits(for: "dir/other", .write), "nor for a holder of another file")
        try await Task.sleep(for: .milliseconds(1500))
        #expect(!b.covers("dir/file", .read), "B locked while A's program held an exclusive lock (no break time)")
        holdersA.set([("dir/file", .read)])
        #expect(
            await Self.granted(reader, within: 5) { b.covers("dir/file", .read) },
            "B's reader once A's holder only reads")
        #expect(
            await ClusterMemberTests.eventually { a.covers("dir/file", .read) }, "A's reader keeps a shared delegation")
        #expect(!a.covers("dir/file", .write))
        let inTheWay = b.othersInTheWay(of: "dir/file", .write)
        #expect(!inTheWay.isEmpty && inTheWay.allSatisfy { $0.host == "A" && !$0.mode.writes }, "\(inTheWay)")
        #expect(b.othersInTheWay(of: "dir/file", .read).isEmpty, "shared locks share")
        await a.leave()
        await b.leave()
    }

    /// A host that dies holding locks loses their delegations with its lease: the other host's
    /// waiting request is granted within the TTL, and keeps it. (The dead host's member must
    /// not join again: a live member whose lease is lost asks again at once for the files its
    /// programs still lock, and the other host, granted, would be recalled for them and wait
    /// behind it for good.)
    @Test func aDeadHostsLocksGoWithItsLease() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let holdersA = Holders(), lifeA = Life()
        let a = try await Self.lockMember("A", client, holdersA, ttl: 2, life: lifeA),
            b = try await Self.lockMember("B", client)
        try await a.acquire("db", .write)
        holdersA.set([("db", .write)])
        let waiting = Task { _ = try await b.acquire("db", .write) }
        try await Task.sleep(for: .milliseconds(500))
        #expect(!b.covers("db", .write))
        lifeA.die()
        try #require(a.currentDelegations).lease.stopRenewing()
        let stopped = ContinuousClock.now
        #expect(
            await Self.granted(waiting, within: 8) { b.covers("db", .write) }, "B was not granted a dead host's lock")
        #expect(ContinuousClock.now - stopped < .seconds(5), "within the TTL (2 s) and a renewal's time")
        try await Task.sleep(for: .milliseconds(500))
        #expect(b.covers("db", .write) && Self.keys(b) == ["B w db"], "B keeps it: \(Self.keys(b))")
        await a.leave()
        await b.leave()
    }

    // MARK: A lost lock lease

    /// A host whose lock lease is lost grants no lock across hosts (the mount answers ENOLCK)
    /// until it has joined again; the new run asks first for the files its programs still lock,
    /// exactly those, while the lost lease's keys keep its place, and the other host waits for
    /// those programs again. Nothing of it fences writes: that is the accesses' member's.
    @Test func aLostLockLeaseGrantsNothingAndTheNewRunAsksAgainForTheLockedFilesFirst() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let holdersA = Holders()
        let a = try await Self.lockMember("A", client, holdersA), b = try await Self.lockMember("B", client)
        try await a.acquire("dir/db", .write)
        holdersA.set([("dir/db", .write)])
        #expect(Self.keys(a) == ["A w dir"], "a host alone takes the directory")
        let first = try #require(a.currentDelegations)
        first.lease.loseLocally()
        #expect(!a.covers("dir/db", .read) && !a.covers("dir/other", .read), "a lost lease grants no lock")
        #expect(!a.coversAccessor("dir/db", .write), "nor to the holder of the file")
        #expect(
            await ClusterMemberTests.eventually(seconds: 10) { ClusterMemberTests.rejoined(a, after: first) },
            "\(a.standing)")
        #expect(
            await ClusterMemberTests.eventually { a.covers("dir/db", .write) && Self.keys(a) == ["A w dir/db"] },
            "asked for again, exactly the file, and the lost lease revoked: \(Self.keys(a))")
        try await a.acquire("dir/other", .write)
        #expect(a.covers("dir/other", .write), "new locks once it has")
        let locker = Task { _ = try await b.acquire("dir/db", .read) }
        try await Task.sleep(for: .milliseconds(500))
        #expect(!b.covers("dir/db", .read), "B locked while A's program held its lock across A's lost lease")
        holdersA.set([])
        #expect(
            await Self.granted(locker, within: 5) { b.covers("dir/db", .read) }, "B's lock once A's program's has gone")
        await a.leave()
        await b.leave()
    }

    /// What the log says when the lock member has joined again: the files kept throughout, and
    /// those another host may have locked meanwhile (no write is fenced for them).
    @Test func aRejoinOfTheLocksTellsWhichFilesAnotherHostMayHaveLocked() {
        let wanted: [String: Delegations.Mode] = ["db": .write, "q/log": .read]
        #expect(
            ClusterMember.rejoinSummary(.locks, wanted: wanted, carried: ["db", "q/log"], stillHad: true)
                == "joined again; 2 file(s) locked here asked for again first")
        #expect(
            ClusterMember.rejoinSummary(.locks, wanted: wanted, carried: ["db"], stillHad: true)
                == "joined again; 2 file(s) locked here asked for again first, 1 kept throughout; 1 may have been locked by another host meanwhile (another host asked for them first): q/log"
        )
        #expect(
            ClusterMember.rejoinSummary(.locks, wanted: wanted, carried: [], stillHad: false)
                == "joined again; 2 file(s) locked here asked for again first, 0 kept throughout; 2 may have been locked by another host meanwhile (the lost lease had ended in etcd): db, q/log"
        )
        #expect(
            ClusterMember.rejoinSummary(.accesses, wanted: wanted, carried: [], stillHad: false)
                == "joined again; 2 item(s) held here asked for again first, 0 open for writing go on, 1 fenced (writes through them fail with EIO: the lost lease had ended in etcd, and other hosts may have written them)"
        )
    }
}
