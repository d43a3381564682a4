@testable import CoordinationCluster
import Foundation
import Testing

/// The etcd client against real etcd members on loopback: keys with any bytes, transactions,
/// leases, watches, and a member lost.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct EtcdClientTests {
    @Test func keysHoldAnyBytesAndPrefixesSelectTheirKeys() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let binary: [UInt8] = [0, 0xff, 0xfe, 10, 0x80]
        let first = try await client.put(Array("a/1".utf8), binary)
        let second = try await client.put(Array("a/2".utf8), [])
        try await client.put(Array("b/1".utf8), Array("other".utf8))
        #expect(second > first)
        let (revision, values) = try await client.get(Array("a/".utf8), prefix: true)
        #expect(revision >= second)
        #expect(values.map(\.key) == [Array("a/1".utf8), Array("a/2".utf8)])
        #expect(values.map(\.value) == [binary, []], "bytes that are not UTF-8, and an empty value")
        #expect(values[0].createRevision == first && values[0].modRevision == first)
        #expect(try await client.get(Array("a/3".utf8)).values.isEmpty)
        #expect(try await client.delete(Array("a/".utf8), prefix: true) == 2)
        #expect(try await client.get(Array("a/".utf8), prefix: true).values.isEmpty)
        #expect(try await client.get(Array("b/1".utf8)).values.count == 1)
    }

    @Test func prefixEndsFollowEtcdsRule() {
        #expect(EtcdClient.prefixEnd(Array("a/".utf8)) == Array("a0".utf8))
        #expect(EtcdClient.prefixEnd([0x61, 0xff]) == [0x62])
        #expect(EtcdClient.prefixEnd([0xff, 0xff]) == [0])
    }

    /// The create-if-absent transaction a grant is made of: the first wins, the second reads
    /// the winner's key.
    @Test func aTransactionMakesAKeyOnlyIfItIsAbsent() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let key = Array("lock/x".utf8)
        let made = try await client.transaction(
            [.absent(key)], success: [.put(key: key, value: Array("A".utf8), lease: nil)],
            failure: [.range(key: key, prefix: false)])
        #expect(made.succeeded && made.ranges.isEmpty)
        let again = try await client.transaction(
            [.absent(key)], success: [.put(key: key, value: Array("B".utf8), lease: nil)],
            failure: [.range(key: key, prefix: false)])
        #expect(!again.succeeded)
        #expect(again.ranges.first?.first?.value == Array("A".utf8))
        #expect(
            again.ranges.first?.first?.createRevision == made.revision, "the revision is the holder's fencing token")
        #expect(
            try await client.transaction([.created(key, at: made.revision)], success: [.delete(key: key)]).succeeded)
        #expect(try await client.get(key).values.isEmpty)
    }

    /// Keys attached to a lease go with it; a lease gone is told as such, not as an error.
    @Test func aLeasesKeysGoWithIt() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let (lease, ttl) = try await client.grantLease(ttl: 5)
        #expect(ttl == 5)
        try await client.put(Array("held/x".utf8), [1], lease: lease)
        #expect(try await client.get(Array("held/x".utf8)).values.first?.lease == lease)
        #expect(try await client.keepAlive(lease) == 5)
        try await client.revoke(lease)
        #expect(try await client.get(Array("held/x".utf8)).values.isEmpty)
        #expect(try await client.keepAlive(lease) == nil)
        try await client.revoke(lease)  // again: not an error
        await #expect(throws: EtcdError.self) { try await client.put(Array("held/y".utf8), [1], lease: lease) }
    }

    /// A watch reports puts and deletes in order, and replays from a revision.
    @Test func aWatchReportsChangesInOrderAndReplaysFromARevision() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let start = try await client.put(Array("w/a".utf8), [1])
        try await client.put(Array("w/b".utf8), [2])
        try await client.delete(Array("w/a".utf8))
        try await client.put(Array("elsewhere".utf8), [3])
        var seen: [(EtcdEvent.Kind, String)] = []
        for try await batch in client.watch(prefix: Array("w/".utf8), from: start) {
            seen += batch.events.map { ($0.kind, String(decoding: $0.keyValue.key, as: UTF8.self)) }
            if seen.count >= 3 { break }
        }
        #expect(seen.map(\.0) == [.put, .put, .delete])
        #expect(seen.map(\.1) == ["w/a", "w/b", "w/a"])
        // From now: a change made after the watch began.
        let watch = client.watch(prefix: Array("w/".utf8), from: nil)
        let reader = Task { () -> [String] in
            for try await batch in watch {
                return batch.events.map { String(decoding: $0.keyValue.key, as: UTF8.self) }
            }
            return []
        }
        try await Task.sleep(for: .milliseconds(300))
        try await client.put(Array("w/c".utf8), [4])
        #expect(try await reader.value == ["w/c"])
    }

    /// A host's lease lives while it is renewed, ends at once when revoked, and is lost when
    /// the cluster cannot be reached for its TTL.
    @Test func aHostLeaseIsKeptAliveRevokedAndLost() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs, requestTimeout: .seconds(1))
        let lease = try await HostLease.grant(on: client, ttl: 2)
        try await client.put(Array("host/a".utf8), [1], lease: lease.id)
        try await Task.sleep(for: .seconds(4))  // twice its TTL: renewed meanwhile
        #expect(!lease.isLost)
        #expect(try await client.get(Array("host/a".utf8)).values.count == 1, "kept alive")
        try await lease.revoke()
        #expect(lease.isLost)
        #expect(try await client.get(Array("host/a".utf8)).values.isEmpty)

        let second = try await HostLease.grant(on: client, ttl: 2)
        servers.kill(0)
        let started = ContinuousClock.now
        await second.waitUntilLost()
        let waited = ContinuousClock.now - started
        #expect(second.isLost)
        #expect(waited < .seconds(6), "lost \(waited) after the cluster went away (TTL 2 s)")
    }

    /// With one of three members killed, requests go to the others.
    @Test func aKilledMemberIsPassedOver() async throws {
        let servers = try EtcdServers(count: 3)
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs, requestTimeout: .seconds(2))
        try await client.put(Array("k".utf8), [1])
        servers.kill(0)
        try servers.waitUntilHealthy()
        try await client.put(Array("k".utf8), [2])
        #expect(try await client.get(Array("k".utf8)).values.first?.value == [2])
        // Every member gone: a clear error, not a hang.
        servers.kill(1)
        servers.kill(2)
        await #expect(throws: EtcdError.self) { try await client.put(Array("k".utf8), [3]) }
    }

    /// A request that every live member refuses for want of a leader waits for the election
    /// (a leader killed: the others elect one within about an election timeout) instead of
    /// failing at once, which a mount would answer ENOLCK.
    @Test func aRequestWaitsOutAnElection() async throws {
        let servers = try EtcdServers(count: 3)
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs, requestTimeout: .seconds(6))
        try await client.put(Array("k".utf8), [1])
        servers.kill(1)
        servers.kill(2)
        // The survivor, without a quorum, soon says it has no leader.
        let quick = EtcdClient(endpoints: [servers.clientURLs[0]], requestTimeout: .milliseconds(500))
        var leaderless = false
        for _ in 0..<50 where !leaderless {
            do { _ = try await quick.get(Array("k".utf8)) } catch {
                leaderless = "\(error)".contains("no leader")
            }
            if !leaderless { try await Task.sleep(for: .milliseconds(100)) }
        }
        try #require(leaderless, "the lone member never said it has no leader")
        let restart = Task.detached {
            try await Task.sleep(for: .milliseconds(300))
            try servers.start(1)
        }
        let asked = ContinuousClock.now
        try await client.put(Array("k".utf8), [2])
        try await restart.value
        #expect(try await client.get(Array("k".utf8)).values.first?.value == [2])
        #expect(ContinuousClock.now - asked > .milliseconds(300), "answered before a quorum was back")
    }
}
