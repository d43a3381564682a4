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
        var theirs: [ObjectIdentifier] = []
        let lock = NSLock()
        let threads = (0..<4).map { _ in
            Thread {
                let value = local.value
                value.touched += 1
                #expect(local.value === value)
                lock.withLock { theirs.append(ObjectIdentifier(value)) }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually { lock.withLock { theirs.count } == 4 })
        #expect(Set(theirs).count == 4 && !theirs.contains(ObjectIdentifier(mine)), "one value per thread")
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
