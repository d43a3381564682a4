@testable import Coordination
import Dispatch
import Glibc
import Synchronization
import Testing

/// Eight threads take random intents on a small tree; an independent checker verifies that no
/// two holders ever conflict, and at the end nothing is held or waiting.
@Suite struct StressTests {
    static let paths = ["/t", "/t/a", "/t/b", "/t/a/x", "/t/a/y", "/t/b/z", "/u"].map { ItemPath($0)! }

    /// The checker: every granted intent of every thread, compared with the predicate's meaning
    /// spelled out independently of `LockMode`.
    final class Invariant: Sendable {
        struct Held {
            let thread: Int
            let path: ItemPath
            let write: Bool
            /// A write with contentIndependentMetadataOnly: it may share with readers (O9).
            let metadataWrite: Bool
            let destructiveDirectory: Bool
        }
        let held = Mutex<[Int: [Held]]>([:])
        let violations = Mutex<[String]>([])

        func enter(_ thread: Int, _ intents: [Intent]) {
            let mine = intents.map {
                Held(
                    thread: thread, path: $0.path, write: $0.kind.isWrite,
                    metadataWrite: $0.kind.writingOptions.contains(.contentIndependentMetadataOnly),
                    destructiveDirectory: $0.target.isDirectory
                        && !$0.kind.writingOptions.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing]))
            }
            held.withLock { held in
                for (other, theirs) in held where other != thread {
                    for x in mine {
                        for y in theirs where Self.clash(x, y) {
                            violations.withLock { $0.append("\(x.path) (\(thread)) vs \(y.path) (\(other))") }
                        }
                    }
                }
                held[thread] = mine
            }
        }

        func leave(_ thread: Int) { held.withLock { $0[thread] = nil } }

        static func clash(_ x: Held, _ y: Held) -> Bool {
            if x.path == y.path {
                if x.write && y.write { return true }
                if x.write { return !x.metadataWrite }
                if y.write { return !y.metadataWrite }
                return false
            }
            if x.path.isAncestor(of: y.path) { return x.destructiveDirectory }
            if y.path.isAncestor(of: x.path) { return y.destructiveDirectory }
            return false
        }
    }

    @Test func eightThreadsRandomIntents() {
        let engine = CoordinationEngine()
        let invariant = Invariant()
        let timeouts = Atomic<Int>(0), deadlocks = Atomic<Int>(0), grants = Atomic<Int>(0),
            listedGrants = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<1_500 {
                let count = Int.random(in: 1...3, using: &generator)
                let intents = (0..<count).map { _ -> Intent in
                    let path = Self.paths.randomElement(using: &generator)!
                    let isDirectory = ["/t", "/t/a", "/t/b"].contains(path.string)
                    let kind: AccessKind =
                        Bool.random(using: &generator)
                        ? .reading([])
                        : .writing(
                            [[], .forDeleting, .forMoving, .forMerging, .contentIndependentMetadataOnly].randomElement(
                                using: &generator)!)
                    return Intent(kind, AccessTarget(path: path, isDirectory: isDirectory))
                }
                let request = AccessRequest(identity: .process(Int32(thread)), intents: intents)
                // Half the one-item requests try first as a mount's requests do: grants on the
                // short list live beside the tables, and the checker sees both kinds together.
                var grant: GrantID? =
                    count == 1 && Bool.random(using: &generator)
                    ? engine.acquireAtOnce(intents[0], for: request.identity) : nil
                if grant == nil {
                    let semaphore = DispatchSemaphore(value: 0)
                    let outcome = Mutex<Result<Grant, CoordinationError>?>(nil)
                    let acquisition = engine.acquire(request) { result in
                        outcome.withLock { $0 = result }
                        semaphore.signal()
                    }
                    switch acquisition {
                    case .granted(let g): grant = g.id
                    case .refused(.deadlock): deadlocks.add(1, ordering: .relaxed)
                    case .refused(let error): Issue.record("refused: \(error)")
                    case .waiting(let ticket):
                        if semaphore.wait(timeout: .now() + 5) == .timedOut {
                            if engine.abandon(ticket, because: .timedOut) {
                                timeouts.add(1, ordering: .relaxed)
                            } else {
                                semaphore.wait()
                            }
                        }
                        grant = outcome.withLock { try? $0?.get().id }
                    }
                }
                guard let grant else { continue }
                grants.add(1, ordering: .relaxed)
                if grant.isOnShortList { listedGrants.add(1, ordering: .relaxed) }
                invariant.enter(thread, intents)
                if Int.random(in: 0..<4, using: &generator) == 0 { usleep(50) }
                invariant.leave(thread)
                engine.release(grant)
            }
        }
        #expect(invariant.violations.withLock { $0 }.isEmpty)
        #expect(timeouts.load(ordering: .relaxed) == 0, "no request waited 5 s: nothing deadlocked")
        #expect(deadlocks.load(ordering: .relaxed) == 0, "single calls are all-or-nothing: no cycle can form")
        #expect(grants.load(ordering: .relaxed) == 8 * 1_500)
        #expect(listedGrants.load(ordering: .relaxed) > 100, "both kinds of grant were exercised")
        #expect(engine.snapshot().isIdle, "no held intent leaked")
    }
}
