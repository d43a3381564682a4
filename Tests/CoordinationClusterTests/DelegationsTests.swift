@testable import CoordinationCluster
import Foundation
import Synchronization
import Testing

/// Delegations between hosts, each host a `Delegations` of its own (its own lease) in this
/// process, against one etcd on loopback.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct DelegationsTests {
    /// A host with its own lease, following the store's delegations.
    static func host(_ name: String, _ client: EtcdClient, ttl: Int64 = 5) async throws -> Delegations {
        let lease = try await HostLease.grant(on: client, ttl: ttl)
        let host = Delegations(client: client, store: "s", host: name, lease: lease)
        try await host.start()
        return host
    }

    /// An acquire under way, and whether it has ended.
    struct Pending: Sendable {
        private final class Ended: Sendable { let value = Atomic<Bool>(false) }
        let task: Task<Int64, Error>
        private let ended = Ended()

        init(_ body: @escaping @Sendable () async throws -> Int64) {
            let ended = self.ended
            task = Task {
                defer { ended.value.store(true, ordering: .releasing) }
                return try await body()
            }
        }

        /// Whether it still waits after half a second.
        func waits() async -> Bool {
            try? await Task.sleep(for: .milliseconds(500))
            return !ended.value.load(ordering: .acquiring)
        }

        var value: Int64 { get async throws { try await task.value } }
    }

    @Test func readersShareAndAWriterWaitsForThemAndRecallsThem() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client),
            c = try await Self.host("C", client)
        _ = try await a.acquire("doc", .read)
        _ = try await b.acquire("doc", .read)  // at once: readers share
        var recallsOfA = a.recalls.makeAsyncIterator(), recallsOfB = b.recalls.makeAsyncIterator()
        let writer = Pending { try await c.acquire("doc", .write) }
        #expect(await writer.waits(), "a writer waits for the readers")
        #expect(await recallsOfA.next()?.wanted.host == "C")
        #expect(await recallsOfB.next()?.wanted.host == "C")
        try await a.release("doc")
        #expect(await writer.waits(), "and for the last of them")
        try await b.release("doc")
        let token = try await writer.value
        #expect(token > 0)
        #expect(c.entries().map(\.host) == ["C"])
    }

    /// A host decides on what etcd holds when its key is made, not on what its replica has
    /// followed so far: one that has just joined, or asks at once after another's grant, waits.
    @Test func aGrantIsNeverMadeOnAReplicaBehindTheKey() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        for round in 0..<10 {
            let first = try await Self.host("A\(round)", client), second = try await Self.host("B\(round)", client)
            _ = try await first.acquire("k\(round)", .write)
            let late = Pending { try await second.acquire("k\(round)/inside", .read) }
            #expect(await late.waits(), "round \(round): granted while another host held the directory")
            try await first.release("k\(round)")
            _ = try await late.value
            // Each host follows the store on a connection of its own, and a client keeps a few.
            await first.leave()
            await second.leave()
        }
    }

    /// A host that died and came back under the same name, within its old lease's TTL, does
    /// not take its earlier run's key for its own: that key holds until the old lease ends.
    @Test func aHostBackFromTheDeadDoesNotAdoptItsEarlierRunsKeys() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let earlier = try await Self.host("A", client, ttl: 3)
        let before = try await earlier.acquire("x", .write)
        earlier.stop()
        earlier.lease.stopRenewing()
        let again = try await Self.host("A", client)
        let waiting = Pending { try await again.acquire("x", .write) }
        #expect(await waiting.waits(), "the earlier run's key is another holder's")
        let token = try await waiting.value
        #expect(token > before)
        await again.leave()
    }

    /// A tentative key (a directory asked for on the replica's word) is taken back by its host
    /// rather than wait: it recalls nobody, and the holder hears only of the request that waits.
    @Test func aTentativeRequestRecallsNobody() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client)
        _ = try await a.acquire("docs/folder/report", .presence)
        var recallsOfA = a.recalls.makeAsyncIterator()
        #expect(try await b.acquireUnlessBlocked("docs", .write) == nil, "A's presence is in the way")
        let deletion = Pending { try await b.acquire("docs/folder", .deleting) }
        let recall = await recallsOfA.next()
        #expect(
            recall?.wanted.path == "docs/folder" && recall?.wanted.mode == .deleting, "\(String(describing: recall))")
        try await a.release("docs/folder/report")
        _ = try await deletion.value
        await a.leave()
        await b.leave()
    }

    /// A request that does not wait (O_NONBLOCK) recalls the holder and waits for it to give the
    /// item back; it ends at once, nil, when the holder refuses it (its programs hold the item)
    /// or a request before it waits itself, and after its patience when nobody answers.
    @Test func aRequestThatDoesNotWaitWaitsOnlyForAnIdleHolder() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client),
            c = try await Self.host("C", client)
        _ = try await a.acquire("doc", .write)
        var recallsOfA = a.recalls.makeAsyncIterator()
        let started = ContinuousClock.now
        let refused = Pending { try await b.acquireIfIdle("doc", .read, patience: .seconds(30)) ?? 0 }
        let next = await recallsOfA.next()
        let recall = try #require(next)
        #expect(recall.wanted.host == "B" && recall.wanted.asksIdle, "\(recall)")
        try await a.refuse(recall.wanted)
        #expect(try await refused.value == 0)
        #expect(ContinuousClock.now - started < .seconds(10), "refused, not given up on")

        let granted = Pending { try await b.acquireIfIdle("doc", .read, patience: .seconds(30)) ?? 0 }
        _ = await recallsOfA.next()
        try await a.release("doc")
        #expect(try await granted.value > 0, "A gave it back")
        try await b.release("doc")

        _ = try await a.acquire("doc", .write)
        let asked = ContinuousClock.now
        #expect(try await b.acquireIfIdle("doc", .read, patience: .milliseconds(300)) == nil, "A does not answer")
        #expect(ContinuousClock.now - asked >= .milliseconds(300))
        #expect(
            await ClusterMemberTests.eventually { !b.entries().contains { $0.host == "B" } }, "its key is taken back")

        let writer = Pending { try await c.acquire("doc", .write) }
        #expect(await writer.waits())
        #expect(try await b.acquireIfIdle("doc", .read, patience: .seconds(30)) == nil, "C waits for it first")
        try await a.release("doc")
        _ = try await writer.value
        await a.leave()
        await b.leave()
        await c.leave()
    }

    /// Waiters are served in the order they came, whatever their modes.
    @Test func hostsAreServedFirstComeFirstServed() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client),
            c = try await Self.host("C", client)
        let first = try await a.acquire("x", .write)
        let reader = Pending { try await b.acquire("x", .read) }
        #expect(await reader.waits())
        let writer = Pending { try await c.acquire("x", .write) }
        #expect(await writer.waits())
        try await a.release("x")
        let second = try await reader.value
        #expect(await writer.waits(), "the writer came after the reader")
        try await b.release("x")
        let third = try await writer.value
        #expect(first < second && second < third, "fencing tokens grow: \(first) \(second) \(third)")
    }

    /// A directory's delegation covers what it holds; items elsewhere are not in the way.
    @Test func aDirectoryCoversWhatItHolds() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client)
        _ = try await a.acquire("dir", .write)
        let inside = Pending { try await b.acquire("dir/sub/file", .read) }
        #expect(await inside.waits(), "an item inside a directory another host writes")
        _ = try await b.acquire("other/file", .write)  // at once
        _ = try await b.acquire("dirt", .write)  // a sibling whose name begins the same
        try await a.release("dir")
        _ = try await inside.value
        let whole = Pending { try await a.acquire("", .write) }
        #expect(await whole.waits(), "the store's root holds everything")
        try await b.release("dir/sub/file")
        try await b.release("other/file")
        try await b.release("dirt")
        _ = try await whole.value
        #expect(Delegations.contains("", "a") && Delegations.contains("a", "a/b") && !Delegations.contains("a", "ab"))
    }

    /// Delegations given back together (idle ones come in hundreds) go a few dozen to a
    /// transaction; one deleted meanwhile behind the replica's back (its lease ended) does not
    /// keep the others, and one never asked for is passed over.
    @Test func severalDelegationsAreGivenBackTogether() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client)
        let paths = (0..<150).map { "d/f\($0)" }
        for path in paths { _ = try await a.acquire(path, .write) }
        a.stop()  // the replica stops following: it keeps the key deleted below
        let prefix = Array("/coordfs/s/delegations/".utf8)
        let gone =
            prefix + Array("d/f7".utf8) + [0] + Array("A".utf8) + [0] + Array(String(a.lease.id, radix: 16).utf8) + [0]
            + Array("w".utf8)
        #expect(try await client.delete(gone) == 1)
        var items: [(path: String, mode: Delegations.Mode)] = paths.map { ($0, .write) }
        items.append(("never/asked", .read))
        try await a.release(items)
        let left = try await client.get(prefix + Array("d/".utf8), prefix: true).values
        #expect(left.isEmpty, "\(left.count) keys left")
        await a.leave()
    }

    /// A host that dies (its lease not renewed) or leaves (its lease revoked) gives back all it
    /// held: the others proceed; its own waits end with the lease.
    @Test func aHostThatDiesOrLeavesGivesBackAllItHeld() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let dead = try await Self.host("dead", client, ttl: 2)
        let b = try await Self.host("B", client)
        _ = try await dead.acquire("f", .write)
        let waiting = Pending { try await b.acquire("f", .write) }
        #expect(await waiting.waits())
        dead.lease.stopRenewing()
        let started = ContinuousClock.now
        _ = try await waiting.value
        #expect(ContinuousClock.now - started < .seconds(5), "within the TTL (2 s) and a renewal's time")

        let leaving = try await Self.host("C", client)
        let held = Pending { try await leaving.acquire("f", .write) }
        #expect(await held.waits(), "B holds it")
        try await leaving.lease.revoke()
        await #expect(throws: Delegations.Failure.leaseLost) { try await held.value }
    }

    /// Writers that share an item on one host share it across hosts: an appender with readers
    /// and other appenders, writers in place with each other and with appenders. A
    /// reader waits for a writer in place, and a plain write for all of them.
    @Test func writersThatShareAnItemShareItAcrossHosts() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client),
            c = try await Self.host("C", client)
        _ = try await a.acquire("log", .appending)
        _ = try await b.acquire("log", .read)  // at once: a reader sees a prefix
        _ = try await c.acquire("log", .appending)  // at once: appenders share
        let writer = Pending { try await c.acquire("log", .write) }
        #expect(await writer.waits(), "a write that truncates waits for them all")
        _ = try await a.acquire("db", .inPlace)
        _ = try await b.acquire("db", .inPlace)  // at once: writers in place share
        _ = try await c.acquire("db", .appending)  // and so does an appender
        let reader = Pending { try await c.acquire("db", .read) }
        #expect(await reader.waits(), "a reader waits for writers in place")
        try await a.release("db")
        try await b.release("db")
        _ = try await reader.value  // its own host's appender is not in its way
        await a.leave()
        await b.leave()
        await c.leave()
    }

    /// A holder answers a request that waits for it on the request's own key, keeping its
    /// delegation: the request ends with the answer (let past, or refused with an errno), its
    /// key deleted; the access asked for came with the recall.
    @Test func aHolderAnswersARequestOnItsKey() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client)
        let held = try await a.acquire("doc", .write)
        var recallsOfA = a.recalls.makeAsyncIterator()
        let passed = Pending { try await b.acquire("doc", .read, request: "r10000") }
        let next = await recallsOfA.next()
        let first = try #require(next)
        #expect(first.wanted.request == "r10000" && first.wanted.mode == .read, "\(first)")
        try await a.answer(first.wanted, .passed)
        await #expect(throws: Delegations.Failure.answered(.passed)) { try await passed.value }
        #expect(await ClusterMemberTests.eventually { a.entries().map(\.host) == ["A"] }, "B's key is deleted")
        let refused = Pending { try await b.acquire("doc", .inPlace, request: "w20000") }
        let following = await recallsOfA.next()
        let second = try #require(following)
        try await a.answer(second.wanted, .refused("EACCES"))
        await #expect(throws: Delegations.Failure.answered(.refused("EACCES"))) { try await refused.value }
        #expect(await ClusterMemberTests.eventually { a.entries().map(\.revision) == [held] }, "A's own stays")
        await a.leave()
        await b.leave()
    }

    /// A read's question waits for the presences of its item alone (not for a write there),
    /// recalls their host, and holds once that host has answered it; it is in nobody's way.
    @Test func aQuestionWaitsForPresencesOnly() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.host("A", client), b = try await Self.host("B", client)
        _ = try await a.acquire("doc", .write)
        _ = try await a.acquire("doc", .presence)
        var recallsOfA = a.recalls.makeAsyncIterator()
        let question = Pending { try await b.acquire("doc", .asking, request: "r0") }
        let next = await recallsOfA.next()
        let recall = try #require(next)
        #expect(recall.held.mode == .presence && recall.wanted.mode == .asking, "\(recall)")
        #expect(await question.waits(), "until A answers")
        try await a.answer(recall.wanted, .granted)
        #expect(try await question.value > 0)
        try await b.release("doc", .asking)
        await a.leave()
        await b.leave()
    }
}
