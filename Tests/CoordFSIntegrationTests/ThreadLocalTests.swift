@testable import CoordFSMount
import Foundation
import TestSupport
import Testing

/// `ThreadLocal`, which the mount's per-request caches keep their last answer in.
@Suite struct ThreadLocalValues {
    final class Box { var touched = 0 }

    @Test func eachThreadHasItsOwnValueAndKeepsIt() throws {
        let local = ThreadLocal { Box() }
        let mine = local.value
        mine.touched += 1
        #expect(local.value === mine, "the same value on the same thread")
        // The values themselves, not their addresses: a value goes with its thread, and the next
        // thread's may take its place in memory.
        var theirs: [Box] = []
        let lock = NSLock()
        let threads = (0..<4).map { _ in
            Thread {
                let value = local.value
                value.touched += 1
                #expect(local.value === value)
                lock.withLock { theirs.append(value) }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually { lock.withLock { theirs.count } == 4 })
        let values = lock.withLock { theirs }
        #expect(Set(values.map(ObjectIdentifier.init)).count == 4 && !values.contains { $0 === mine }, "one value per thread")
        #expect(values.allSatisfy { $0.touched == 1 })
        #expect(mine.touched == 1)
    }

    @Test func keysAreGivenBackWithTheirOwner() {
        // More owners than the process has keys (1024): each returns its key when it goes.
        for _ in 0..<2000 {
            let local = ThreadLocal { Box() }
            local.value.touched += 1
            #expect(local.value.touched == 1)
        }
    }
}
