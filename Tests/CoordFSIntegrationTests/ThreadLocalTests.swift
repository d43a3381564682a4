@testable import CoordFSMount
import Foundation
import Synchronization
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
        let theirs = Mutex<[Box]>([])
        let threads = (0..<4).map { _ in
            Thread {
                let value = local.value
                value.touched += 1
                #expect(local.value === value)
                theirs.withLock { $0.append(value) }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually { theirs.withLock { $0.count } == 4 })
        let values = theirs.withLock { $0 }
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
