@testable import CoordinationCluster
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A host's record in its store (`HostRecord`): hosts that could not coordinate with each other
/// (another format of keys, or one host name twice) find out at join, before either grants.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct HostRecordTests {
    /// Puts a record of `host` as another run would, under `lease`.
    static func put(
        _ record: HostRecord?, raw: String? = nil, of host: String, lease: Int64, on client: EtcdClient
    ) async throws {
        let key = Array("/coordfs/s/hosts/\(host)\0\(String(lease, radix: 16))".utf8)
        let value = try raw.map { Array($0.utf8) } ?? Array(JSONEncoder().encode(record!))
        _ = try await client.put(key, value, lease: lease)
    }

    static func records(on client: EtcdClient) async throws -> [String] {
        try await client.get(Array("/coordfs/s/hosts/".utf8), prefix: true).values.map {
            String(decoding: $0.key.dropFirst("/coordfs/s/hosts/".utf8.count).prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    static func joining(_ name: String, _ client: EtcdClient, ttl: Int64 = 5) async throws -> Delegations {
        let lease = try await HostLease.grant(on: client, ttl: ttl)
        let host = Delegations(client: client, store: "s", host: name, lease: lease)
        do { try await host.start(release: "9.9.9") } catch {
            _ = try? await lease.revoke()
            throw error
        }
        return host
    }

    static func elsewhere(pid: Int32 = 4242) -> HostRecord {
        HostRecord(
            format: HostRecord.currentFormat, machine: "0123456789abcdef0123456789abcdef", boot: "another-boot",
            pidNamespace: "pid:[1]", pid: pid, started: 1, ttl: 3, release: "9.9.9")
    }

    @Test func aHostOfAnotherFormatIsRefusedAndLeavesNoRecord() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let older = try await HostLease.grant(on: client, ttl: 10)
        var record = Self.elsewhere()
        record.format = 1
        record.release = "0.0.9"
        try await Self.put(record, of: "old", lease: older.id, on: client)
        await #expect(
            throws: Delegations.Failure.cannotJoin(
                "host 'old' of this store runs coordfs 0.0.9 (cluster format 1, this coordfs's is \(HostRecord.currentFormat)): every host of a store must run the same coordfs"
            )
        ) {
            _ = try await Self.joining("B", client)
        }
        #expect(try await Self.records(on: client) == ["old"], "B's record was taken back")
        // A record this coordfs cannot read at all is of another release too.
        try await Self.put(nil, raw: "format one", of: "odd", lease: older.id, on: client)
        _ = try await client.delete(Array("/coordfs/s/hosts/old\0\(String(older.id, radix: 16))".utf8))
        await #expect(
            throws: Delegations.Failure.cannotJoin(
                "host 'odd' of this store runs coordfs of another release (cluster format 0, this coordfs's is \(HostRecord.currentFormat)): every host of a store must run the same coordfs"
            )
        ) {
            _ = try await Self.joining("B", client)
        }
        try await older.revoke()
        let b = try await Self.joining("B", client)
        #expect(try await Self.records(on: client) == ["B"])
        await b.leave()
    }

    /// Another machine's live run under this host's name keeps its lease alive: refused once
    /// its TTL has passed (a dead one's lease would have ended by then).
    @Test func aLiveHostOfTheSameNameElsewhereIsRefusedAfterTheTTL() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let live = try await HostLease.grant(on: client, ttl: 2)
        try await Self.put(Self.elsewhere(), of: "render1", lease: live.id, on: client)
        let started = ContinuousClock.now
        let refusal = await #expect(throws: Delegations.Failure.self) {
            _ = try await Self.joining("render1", client, ttl: 2)
        }
        let waited = ContinuousClock.now - started
        // Whether the refusal saw the renewal depends on when etcd was asked (it answers whole
        // seconds left); either way it names the run and says what to do.
        let why = refusal?.description ?? ""
        #expect(
            why.contains("'render1'") && why.contains("01234567") && why.contains("give each host its own --host-name"),
            "\(why)")
        #expect(waited >= .milliseconds(2500), "refused after \(waited), before a dead run's lease would have ended")
        let other = try await Self.joining("render2", client, ttl: 2)
        #expect(Set(try await Self.records(on: client)) == ["render1", "render2"])
        await other.leave()
        try await live.revoke()
    }

    /// Another machine's run that died keeps its record until its lease ends: waited out.
    @Test func aDeadRunOfTheSameNameElsewhereIsWaitedOut() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let (dead, _) = try await client.grantLease(ttl: 2)  // never renewed
        try await Self.put(Self.elsewhere(), of: "render1", lease: dead, on: client)
        let host = try await Self.joining("render1", client)
        #expect(try await Self.records(on: client) == ["render1"])
        await host.leave()
    }

    /// On this machine the process tells: a live one is refused at once, one that has gone is
    /// an earlier run (killed, and started again within its TTL), and so is a pid used again.
    /// In another pid namespace (a container) the process cannot be looked up: as elsewhere.
    @Test func hereALiveRunIsRefusedAtOnceAndAGoneOneIsAnEarlierRun() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let lease = try await HostLease.grant(on: client, ttl: 10)
        var here = HostRecord.this(release: "9.9.9", ttl: 2)
        here.pid = 1
        here.started = try #require(HostRecord.start(of: 1))
        try await Self.put(here, of: "A", lease: lease.id, on: client)
        let started = ContinuousClock.now
        await #expect(throws: Delegations.Failure.self) { _ = try await Self.joining("A", client) }
        #expect(ContinuousClock.now - started < .seconds(2), "a live process here is not waited for")

        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        here.pid = gone.processIdentifier
        try await Self.put(here, of: "A", lease: lease.id, on: client)
        var again = ContinuousClock.now
        var host = try await Self.joining("A", client)
        #expect(ContinuousClock.now - again < .seconds(2), "an earlier run is not waited for")
        await host.leave()

        // Nor is a pid used again by another process since.
        here.pid = 1
        here.started += 1
        try await Self.put(here, of: "A", lease: lease.id, on: client)
        again = ContinuousClock.now
        host = try await Self.joining("A", client)
        #expect(ContinuousClock.now - again < .seconds(2), "pid 1 started at another time is not the run")
        await host.leave()

        // A gone pid in another pid namespace is not known to be gone: waited for, then refused.
        here.pid = gone.processIdentifier
        here.pidNamespace = "pid:[1]"
        try await Self.put(here, of: "A", lease: lease.id, on: client)
        again = ContinuousClock.now
        await #expect(throws: Delegations.Failure.self) { _ = try await Self.joining("A", client, ttl: 2) }
        #expect(ContinuousClock.now - again >= .milliseconds(2500), "another namespace's pid was taken for gone")
        try await lease.revoke()
    }

    /// A daemon killed with -9 where nobody reaps its children (a container's first process
    /// that waits for none) stays a zombie: it runs nothing, and is an earlier run, not a live
    /// host of the same name (the mount after it was refused with "give each host its own
    /// --host-name").
    @Test func aZombieIsNoLiveRun() async throws {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { free(argv[0]) }
        try #require(posix_spawn(&pid, "/bin/true", nil, nil, &argv, environ) == 0)
        defer { waitpid(pid, nil, 0) }
        // Not reaped yet: a zombie once it has run (unless this process reaps by itself).
        var state = "", started: UInt64?
        for _ in 0..<200 {
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            let fields = stat.lastIndex(of: ")").map { stat[stat.index(after: $0)...].split(separator: " ") } ?? []
            state = fields.first.map(String.init) ?? ""
            if fields.count > 19 { started = UInt64(fields[19]) }
            if state != "R" && state != "S" && state != "D" { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(HostRecord.start(of: pid) == nil, "a process in state \(state) counts as running")
        var record = HostRecord.this(release: "9.9.9", ttl: 2)
        record.pid = pid
        record.started = started ?? 0
        #expect(!record.mayBeLive, "the zombie (state \(state)) is taken for a live run")
        #expect(HostRecord.start(of: getpid()) != nil, "this process runs")
    }

    /// An earlier run elsewhere whose lease outlasts this host's TTL (it no longer renews it)
    /// is named with the time etcd keeps its lease still, not as another host of the same name.
    @Test func anEarlierRunElsewhereIsNamedWithTheTimeItsLeaseHasLeft() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let (dead, _) = try await client.grantLease(ttl: 30)  // never renewed
        var record = Self.elsewhere()
        record.ttl = 30
        try await Self.put(record, of: "render1", lease: dead, on: client)
        let refusal = await #expect(throws: Delegations.Failure.self) {
            _ = try await Self.joining("render1", client, ttl: 2)
        }
        let why = refusal?.description ?? ""
        #expect(
            why.contains(
                "still held by an earlier run on machine 01234567 (pid 4242 there), which no longer renews its lease"),
            "\(why)")
        let left = why.firstRange(of: "etcd ends that lease in ").flatMap {
            Int(why[$0.upperBound...].prefix { $0.isNumber })
        }
        #expect(left.map { (20...30).contains($0) } == true, "\(why)")
        #expect(try await client.timeToLive(dead) != nil)
        try await client.revoke(dead)
        #expect(try await client.timeToLive(dead) == nil, "a revoked lease has no time left")
    }
}
