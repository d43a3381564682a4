import CoordinationRuntime
import Foundation
import Synchronization
import TestSupport
import Testing

/// `ThreadLocal`, which the mount's per-request caches keep their last answer in.
@Suite struct ThreadLocalValues {
    // Each box is touched by its own thread, and read by the test once that thread is done.
    final class Box: @unchecked Sendable { var touched = 0 }

    @Test func eachThreadHasItsOwnValueAndKeepsIt() throws {
        let local = ThreadLocal { Box() }
        let mine = local.withValue { $0 }
        mine.touched += 1
        #expect(local.withValue { $0 } === mine, "the same value on the same thread")
        // The values themselves, not their addresses: a value goes with its thread, and the next
        // thread's may take its place in memory.
        let theirs = Mutex<[Box]>([])
        let threads = (0..<4).map { _ in
            Thread {
                let value = local.withValue { $0 }
                value.touched += 1
                #expect(local.withValue { $0 } === value)
                theirs.withLock { $0.append(value) }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually { theirs.withLock { $0.count } == 4 })
        let values = theirs.withLock { $0 }
        #expect(
            Set(values.map(ObjectIdentifier.init)).count == 4 && !values.contains { $0 === mine },
            "one value per thread")
        #expect(values.allSatisfy { $0.touched == 1 })
        #expect(mine.touched == 1)
    }

    @Test func keysAreGivenBackWithTheirOwner() {
        // More owners than the process has keys (1024): each returns its key when it goes.
        for _ in 0..<2000 {
            let local = ThreadLocal { Box() }
            local.withValue { $0.touched += 1 }
            #expect(local.withValue { $0.touched } == 1)
        }
    }

    /// Counts the values destroyed.
    final class Ends: Sendable {
        let count = Atomic<Int>(0)
    }

    /// A value type kept per thread; its token tells when the value is destroyed.
    struct Counted {
        final class Token: Sendable {
            let ends: Ends
            init(_ ends: Ends) { self.ends = ends }
            deinit { ends.count.add(1, ordering: .relaxed) }
        }
        var uses = 0
        let token: Token
    }

    @Test func aStructValueChangesInPlaceAndGoesWithItsThread() {
        let ends = Ends()
        let local = ThreadLocal { Counted(token: Counted.Token(ends)) }
        let seen = Mutex<[Int]>([])
        for _ in 0..<3 {
            Thread {
                for _ in 0..<5 { local.withValue { $0.uses += 1 } }
                let uses = local.withValue { $0.uses }
                seen.withLock { $0.append(uses) }
            }.start()
        }
        #expect(eventually { seen.withLock { $0.count } == 3 })
        #expect(seen.withLock { $0 } == [5, 5, 5], "each thread changed its own value in place")
        #expect(eventually { ends.count.load(ordering: .relaxed) == 3 }, "each value destroyed when its thread ended")
    }
}
