import CoordinationCluster
import Foundation

// How long a host waits for a delegation through etcd: taken when no other host holds the item,
// and handed over by another host that holds it (its recall heard, the item given back, the
// grant seen). Figures, not assertions: `make bench-cluster` prints them against a 3-member
// cluster in network namespaces of its own. Endpoints: CLUSTER_ENDPOINTS (comma-separated).

guard let endpoints = ProcessInfo.processInfo.environment["CLUSTER_ENDPOINTS"]?.split(separator: ",").map(String.init),
      !endpoints.isEmpty else {
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
