import CoordinationCluster
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// How long a host waits for a delegation through etcd: taken when no other host holds the item,
// and handed over by another host that holds it (its recall heard, the item given back, the
// grant seen); an item asked for beside thousands of other hosts' keys in its directory; and
// files created by three hosts at once in one directory, each create as a mount makes it (its
// claim, the delegation it needs, the file). Figures, not assertions: `make bench-cluster`
// prints them against a 3-member cluster in network namespaces of its own. Endpoints:
// CLUSTER_ENDPOINTS (comma-separated).

guard let endpoints = ProcessInfo.processInfo.environment["CLUSTER_ENDPOINTS"]?.split(separator: ",").map(String.init),
    !endpoints.isEmpty
else {
    FileHandle.standardError.write(Data("CLUSTER_ENDPOINTS is not set (run through Benchmarks/clusterbench.py)\n".utf8))
    exit(2)
}
let rounds = Int(CommandLine.arguments.dropFirst().first ?? "") ?? 200

func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e3 + Double(attoseconds) / 1e15
}

func summary(_ samples: [Double]) -> String {
    let sorted = samples.sorted()
    func at(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
    return String(format: "p50 %6.2f ms   p99 %6.2f ms   max %6.2f ms", at(0.5), at(0.99), sorted.last ?? 0)
}

let client = EtcdClient(endpoints: endpoints)
let store = "bench-\(getpid())"
let a = Delegations(client: client, store: store, host: "A", lease: try await HostLease.grant(on: client, ttl: 10))
let b = Delegations(client: client, store: store, host: "B", lease: try await HostLease.grant(on: client, ttl: 10))
try await a.start()
try await b.start()

// A gives back what another host wants as soon as it hears the recall.
let giver = Task {
    for await recall in a.recalls { try? await a.release(recall.held.path) }
}

var alone: [Double] = []
for round in 0..<rounds {
    let started = ContinuousClock.now
    _ = try await b.acquire("alone/\(round)", .write)
    alone.append(milliseconds(ContinuousClock.now - started))
    try await b.release("alone/\(round)")
}

var handedOver: [Double] = []
for round in 0..<rounds {
    let path = "shared/\(round % 10)"
    _ = try await a.acquire(path, .write)
    let started = ContinuousClock.now
    _ = try await b.acquire(path, .write)
    handedOver.append(milliseconds(ContinuousClock.now - started))
    try await b.release(path)
}

print("delegation of an item through etcd (3 members), \(rounds) rounds each:")
print("  no other host holds it:       \(summary(alone))")
print("  handed over by another host:  \(summary(handedOver))")
giver.cancel()
await a.leave()
await b.leave()

/// A host's own coordination, as a member sees it: holders set by the bench, and nobody to ask.
/// `tells`: whether it tells the member of its holders' changes (`LocalChanges.holders`), or
/// leaves the member's recalls to look again every few milliseconds.
final class BenchHolders: LocalAccesses, Sendable {
    private let held = Mutex<[(path: String, mode: Delegations.Mode)]>([])
    private let changed = Mutex<(@Sendable () -> Void)?>(nil)
    private let tells: Bool
    init(tells: Bool = false) { self.tells = tells }
    func hold(_ path: String, _ mode: Delegations.Mode) {
        held.withLock { $0.append((path, mode)) }
        tell()
    }
    func end(_ path: String) {
        held.withLock { $0.removeAll { $0.path == path } }
        tell()
    }
    private func tell() {
        let changed = self.changed.withLock { $0 }
        changed?()
    }
    func holders() -> [(path: String, mode: Delegations.Mode)] { held.withLock { $0 } }
    func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess { NoAccess() }
    struct NoAccess: LocalAccess { func end() {} }
    func observeChanges(_ changed: @escaping @Sendable () -> Void) -> LocalChanges {
        guard tells else { return [] }
        self.changed.withLock { $0 = changed }
        return .holders
    }
}

func member(
    _ name: String, of store: String, on client: EtcdClient, _ local: BenchHolders = BenchHolders(),
    idleTime: Duration?
) async throws -> ClusterMember {
    let member = ClusterMember(
        join: {
            let lease = try await HostLease.grant(on: client, ttl: 10)
            let delegations = Delegations(client: client, store: store, host: name, lease: lease)
            try await delegations.start()
            return delegations
        }, local: local, breakTime: nil, idleTime: idleTime)
    try await member.start()
    return member
}

// A program's write handed over between two hosts' members: A's program holds the item, B asks
// for it and waits (A's recall waits for the program); from the end of A's program to B's
// grant. Told of the end (`LocalChanges`), A's recall gives the item back at once; untold, at
// its next look, every few milliseconds (as every recall did before the news).
do {
    print("a program's item handed over to another host as the program ends, \(rounds) rounds each:")
    for tells in [false, true] {
        let handStore = "\(store)-hand-\(tells ? "told" : "untold")"
        let holdersA = BenchHolders(tells: tells)
        let hostA = try await member("A", of: handStore, on: client, holdersA, idleTime: nil)
        let hostB = try await member("B", of: handStore, on: client, idleTime: nil)
        var samples: [Double] = []
        for round in 0..<rounds {
            let path = "hand/\(round)"
            holdersA.hold(path, .write)
            try await hostA.acquire(path, .write)
            let asked = Task {
                try await hostB.acquire(path, .write)
                return ContinuousClock.now
            }
            // A's recall waits for its program (and has looked once: the end comes later).
            while !hostA.recallWaits(for: path, .write) { try await Task.sleep(for: .milliseconds(1)) }
            try await Task.sleep(for: .milliseconds(20))
            let ended = ContinuousClock.now
            holdersA.end(path)
            let granted = try await asked.value
            samples.append(milliseconds(granted - ended))
        }
        print("  the end \(tells ? "told:  " : "untold:")                 \(summary(samples))")
        await hostA.leave()
        await hostB.leave()
    }
}

// An item asked for in a directory where another host has made thousands of keys (one per
// item, kept: no idle time): each request used to sort and scan every key (14 ms each at 500
// keys, 287 ms at 3 000); with the replica indexed by path the figures stay flat.
do {
    let crowdStore = "\(store)-crowd"
    let holdersA = BenchHolders()
    let hostA = try await member("A", of: crowdStore, on: client, holdersA, idleTime: nil)
    let hostB = try await member("B", of: crowdStore, on: client, idleTime: nil)
    // A's program keeps an item of the directory: B asks for each of its items alone, and A
    // for each of its own beside B's.
    holdersA.hold("crowd/a", .write)
    try await hostA.acquire("crowd/a", .write)
    var made = 0, asked = 0
    print("an item asked for beside another host's keys in its directory, \(rounds) rounds each:")
    for keys in [1, 1000, 3000] {
        while made < keys {
            try await hostB.acquire("crowd/b\(made)", .write)
            made += 1
        }
        var samples: [Double] = []
        for _ in 0..<rounds {
            let started = ContinuousClock.now
            try await hostA.acquire("crowd/new\(asked)", .write)
            samples.append(milliseconds(ContinuousClock.now - started))
            asked += 1
        }
        print(
            "  beside \(String(keys).padding(toLength: 5, withPad: " ", startingAt: 0)) keys:          \(summary(samples))"
        )
    }
    await hostA.leave()
    await hostB.leave()
}

/// What creators made: each create's time (ms) from its claim to its close, how many of them
/// waited for a delegation, and how many creators stopped on a failure.
struct Creates: Sendable {
    var samples: [Double] = []
    var waited = 0
    var failed = 0

    mutating func add(_ other: Creates) {
        samples += other.samples
        waited += other.waited
        failed += other.failed
    }

    /// Runs `body` on a thread of its own, outside the tasks' pool, and returns what it returns.
    static func onThread(_ body: @escaping @Sendable () -> Creates) async -> Creates {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    /// One creator's files, one after another until `end`: `many/<prefix>-<n>` in the store,
    /// made as `<backing>/<prefix>-<n>` (one directory for the three hosts, as a shared backing
    /// has). It stops at the first create that fails.
    static func made(
        until end: ContinuousClock.Instant, prefix: String, in backing: String, on host: ClusterMember,
        _ local: BenchHolders
    ) -> Creates {
        var made = Creates()
        while ContinuousClock.now < end {
            let name = "\(prefix)-\(made.samples.count)"
            let started = ContinuousClock.now
            guard let waited = create("many/\(name)", file: "\(backing)/\(name)", on: host, local) else {
                made.failed += 1
                break
            }
            let (seconds, attoseconds) = (ContinuousClock.now - started).components
            made.samples.append(Double(seconds) * 1e3 + Double(attoseconds) / 1e15)
            if waited { made.waited += 1 }
        }
        return made
    }

    /// A mount's create of `path` on `host` (`coordinateInCluster`): the claim, a write in place
    /// of the new item, taken in the host's coordination (`local`) and kept if the host's
    /// delegations cover it, else given back while the delegation is waited for (on this
    /// thread, as a request waits) and taken again; the file made and closed; the claim ended
    /// with the open. Whether it waited for a delegation; nil when it could not have one, or
    /// the file was not made.
    static func create(_ path: String, file: String, on host: ClusterMember, _ local: BenchHolders) -> Bool? {
        var waited = false
        while true {
            local.hold(path, .inPlace)
            if host.covers(path, .inPlace) { break }
            local.end(path)
            waited = true
            guard waitForDelegation(path, .inPlace, on: host) else { return nil }
        }
        defer { local.end(path) }
        let fd = open(file, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return nil }
        close(fd)
        return waited
    }

    /// Waits on this thread for `host` to acquire `mode` of `path`, its acquire a task of its
    /// own (as a mount's request waits for its delegation): whether it did.
    static func waitForDelegation(_ path: String, _ mode: Delegations.Mode, on host: ClusterMember) -> Bool {
        let acquired = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                try await host.acquire(path, mode)
                acquired.store(true, ordering: .relaxed)
            } catch {}
            done.signal()
        }
        done.wait()
        return acquired.load(ordering: .relaxed)
    }
}

// Three hosts creating files in one directory at once, as a mount's creates there do (its
// `create` through `coordinateInCluster`): each takes its claim in its host's own coordination
// (a write in place of the new file, what an O_CREAT open without O_TRUNC holds), goes on if the
// host's delegations cover it, else gives the claim back unused, waits for the delegation and
// takes the claim again; then the file is made and closed, and the claim ends with the open.
// The creators are threads, as the kernel's request threads are in a mount, not tasks: a task
// whose request its host's directory delegation covered never suspended, so a host's four such
// loops kept the tasks' threads (one per core: two here) to themselves for the whole run, and
// the recall of that delegation, heard and answered by tasks, waited for them to end, and so
// did the other two hosts. Delegations given back idle, as a mount's.
do {
    let seconds = 5, perHost = 4
    let manyStore = "\(store)-many"
    let backing = NSTemporaryDirectory() + "coordfs-clusterbench-\(getpid())-many"
    try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: backing) }
    var hosts: [(name: String, member: ClusterMember, local: BenchHolders)] = []
    for name in ["A", "B", "C"] {
        let local = BenchHolders()
        let host = try await member(name, of: manyStore, on: client, local, idleTime: ClusterMember.defaultIdleTime)
        hosts.append((name, host, local))
    }
    let end = ContinuousClock.now + .seconds(seconds)
    let results = await withTaskGroup(of: (String, Creates).self, returning: [String: Creates].self) { group in
        for (name, host, local) in hosts {
            for creator in 0..<perHost {
                group.addTask {
                    let made = await Creates.onThread {
                        Creates.made(until: end, prefix: "\(name)\(creator)", in: backing, on: host, local)
                    }
                    return (name, made)
                }
            }
        }
        var byHost: [String: Creates] = [:]
        for await (name, made) in group { byHost[name, default: Creates()].add(made) }
        return byHost
    }
    print("files created by 3 hosts in one directory, \(perHost) at a time on each, for \(seconds) s:")
    for (name, made) in results.sorted(by: { $0.key < $1.key }) {
        let rate = String(format: "%6.0f", Double(made.samples.count) / Double(seconds))
        let waited = String(format: "%3.0f", 100 * Double(made.waited) / Double(max(made.samples.count, 1)))
        let times = made.samples.isEmpty ? "none made" : summary(made.samples)
        print("  host \(name): \(rate) a second, \(waited) % waited for a delegation   \(times)")
        if made.failed > 0 { print("    \(made.failed) creator(s) stopped: no delegation, or the file not made") }
    }
    for (_, host, _) in hosts { await host.leave() }
}
