import Coordination
import Dispatch
import CoordinationRuntime
import FileCoordination
import Foundation

// The coordination engine's benchmark: latency of an uncontended acquire+release, throughput
// under contention, and the cost of presenters registered elsewhere. Figures, not assertions:
// `make bench` prints them.

let quick = CommandLine.arguments.contains("--quick")
let latencyIterations = quick ? 20_000 : 200_000
let throughputSeconds = quick ? 0.3 : 1.0

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func nanoseconds(_ duration: Duration) -> Double {
    let (s, a) = duration.components
    return Double(s) * 1e9 + Double(a) / 1e9
}

/// Median and p99 of acquire+release of `intent` by one coordinator, nothing else held.
func latency(_ engine: CoordinationEngine, _ intent: Intent) -> (median: Double, p99: Double) {
    let request = AccessRequest(identity: .process(1), intents: [intent])
    var samples = [Double]()
    samples.reserveCapacity(latencyIterations)
    let clock = ContinuousClock()
    for _ in 0..<1_000 {  // warm up
        if case .granted(let grant) = engine.acquire(request, resume: { _ in }) { engine.release(grant.id) }
    }
    for _ in 0..<latencyIterations {
        let start = clock.now
        guard case .granted(let grant) = engine.acquire(request, resume: { _ in }) else { fatalError("contended") }
        engine.release(grant.id)
        samples.append(nanoseconds(clock.now - start))
    }
    samples.sort()
    return (percentile(samples, 0.5), percentile(samples, 0.99))
}

/// Acquire+release per second with `threads` threads writing one item or one item each.
func throughput(threads: Int, sameItem: Bool) -> Double {
    let engine = CoordinationEngine()
    let deadline = DispatchTime.now() + throughputSeconds
    // Each thread writes its own slot, read once every thread has ended.
    nonisolated(unsafe) let counts = UnsafeMutableBufferPointer<Int>.allocate(capacity: threads)
    counts.initialize(repeating: 0)
    defer { counts.deallocate() }
    DispatchQueue.concurrentPerform(iterations: threads) { thread in
        let path = ItemPath(sameItem ? "/bench/item" : "/bench/item\(thread)")!
        let request = AccessRequest(identity: .process(Int32(thread)), intents: [.write(path)])
        let semaphore = DispatchSemaphore(value: 0)
        var done = 0
        while DispatchTime.now() < deadline {
            for _ in 0..<64 {
                let grant: GrantID
                switch engine.acquire(
                    request,
                    resume: { result in
                        if case .success(let g) = result { box[thread] = g.id }
                        semaphore.signal()
                    })
                {
                case .granted(let g): grant = g.id
                case .waiting: semaphore.wait(); grant = box[thread]!
                case .refused(let error): fatalError("\(error)")
                }
                engine.release(grant)
                done += 1
            }
        }
        counts[thread] = done
    }
    return Double(counts.reduce(0, +)) / throughputSeconds
}

/// Grants handed from the waking thread to the waiter (one slot per thread).
nonisolated(unsafe) var box = [GrantID?](repeating: nil, count: 64)

func format(_ ns: Double) -> String { String(format: "%8.0f ns", ns) }

print(
    "coordfs engine benchmark (\(quick ? "quick" : "full") run, \(ProcessInfo.processInfo.activeProcessorCount) cores)")
print("")
print("uncontended acquire+release, \(latencyIterations) iterations")
let idle = CoordinationEngine()
let item = ItemPath("/home/user/docs/report.txt")!
for (name, intent) in [("read ", Intent.read(item)), ("write", Intent.write(item))] {
    let (median, p99) = latency(idle, intent)
    print("  \(name)  median \(format(median))   p99 \(format(p99))")
}

print("")
print("throughput, writes, acquire+release per second")
for threads in [1, 2, 8] {
    let one = throughput(threads: threads, sameItem: true)
    let distinct = throughput(threads: threads, sameItem: false)
    print(
        String(
            format: "  %d thread%@  one item %10.0f/s   distinct items %10.0f/s", threads, threads == 1 ? " " : "s",
            one, distinct))
}

print("")
print("write latency with presenters registered elsewhere in the tree")
for count in [0, 10, 1_000, 100_000] {
    let engine = CoordinationEngine()
    for index in 0..<count {
        _ = engine.addPresenter(
            PresenterRecord(owner: .object(1), path: ItemPath("/home/user/other/d\(index % 100)/f\(index)")!))
    }
    let (median, p99) = latency(engine, .write(item))
    print(String(format: "  %7d presenters  median %@   p99 %@", count, format(median), format(p99)))
}
do {
    let engine = CoordinationEngine()
    _ = engine.addPresenter(PresenterRecord(owner: .object(2), path: item))
    let (median, p99) = latency(engine, .write(item))
    print(
        "  plus a presenter of the item itself (its request is planned, not delivered)  median \(format(median))   p99 \(format(p99))"
    )
}

print("")
print("FileCoordinator.coordinate(writingItemAt:), with its realpath and stat calls")
let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("coordfs-bench-\(getpid())")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
let file = directory.appendingPathComponent("file")
guard FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8)) else {
    fatalError("cannot create \(file.path)")
}
/// The latency of a coordinated write of `file` by `coordinator`.
func coordinatedWrite(_ coordinator: FileCoordinator, iterations: Int) throws -> (Double, Double) {
    var samples = [Double]()
    for _ in 0..<iterations {
        let start = ContinuousClock.now
        try coordinator.coordinate(writingItemAt: file) { _ in }
        samples.append(nanoseconds(ContinuousClock.now - start))
    }
    samples.sort()
    return (percentile(samples, 0.5), percentile(samples, 0.99))
}
// In this process only: the engine and the API's own cost.
let (inProcess, inProcess99) = try coordinatedWrite(
    FileCoordinator(domain: CoordinationDomain()), iterations: latencyIterations / 10)
print("  write, in this process  median \(format(inProcess))   p99 \(format(inProcess99))")
// As programs coordinate outside mounts: with every other process, through the user's daemon
// (a hold and its release, each a round trip on its socket).
if CoordinationDomain.shared.usesDaemon {
    let (across, across99) = try coordinatedWrite(FileCoordinator(), iterations: latencyIterations / 100)
    print("  write, across processes (the user's daemon)  median \(format(across))   p99 \(format(across99))")
}
try? FileManager.default.removeItem(at: directory)

print("")
print("Claim.begin + end, as the mount takes one for a request that waits or asks presenters")
let claimDomain = CoordinationDomain()
let claimIntent = Intent(.writing([]), AccessTarget(path: ItemPath("/bench/mount/dir/file")!, isDirectory: false))
var samples = [Double]()
for index in 0..<latencyIterations {
    let start = ContinuousClock.now
    Claim.begin(
        in: claimDomain, identity: .process(Int32(1000 + index % 7)), intents: [claimIntent],
        timeout: .seconds(60)
    ) { result in
        if case .success(let claim) = result {
            claim.end(outcome: IntentOutcome(existedBefore: true, existsAfter: false, changed: false), in: claimDomain)
        }
    }
    samples.append(nanoseconds(ContinuousClock.now - start))
}
samples.sort()
print("  write  median \(format(percentile(samples, 0.5)))   p99 \(format(percentile(samples, 0.99)))")

print("")
print(
    "a grant at once + release: from the tables (acquireAtOnce(_:)) and as the mount takes one (acquireAtOnce(_:for:))")
for (name, oneItem) in [("tables", false), ("short list", true)] {
    samples = []
    for index in 0..<latencyIterations {
        let identity = CoordinatorIdentity.process(Int32(1000 + index % 7))
        let start = ContinuousClock.now
        let grant =
            oneItem
            ? claimDomain.engine.acquireAtOnce(claimIntent, for: identity)
            : claimDomain.engine.acquireAtOnce(AccessRequest(identity: identity, intents: [claimIntent], waits: false))
        if let grant {
            claimDomain.engine.release(
                grant, outcome: IntentOutcome(existedBefore: true, existsAfter: false, changed: false))
        }
        samples.append(nanoseconds(ContinuousClock.now - start))
    }
    samples.sort()
    print("  write, \(name)  median \(format(percentile(samples, 0.5)))   p99 \(format(percentile(samples, 0.99)))")
}
