@testable import CoordFSMount
import Foundation
import Synchronization
import TestSupport
import Testing

/// `StripedCounter`, which counts the mount's coordinated requests.
@Suite struct StripedCounterSums {
    @Test func addsFromManyThreadsAllCount() {
        let counter = StripedCounter()
        let finished = Atomic<Int>(0)
        for _ in 0..<8 {
            Thread {
                for _ in 0..<10_000 { counter.add() }
                counter.add(5)
                finished.add(1, ordering: .relaxed)
            }.start()
        }
        #expect(eventually { finished.load(ordering: .relaxed) == 8 })
        #expect(counter.value == 8 * 10_005)
    }

    @Test func addsOnOneThreadCount() {
        let counter = StripedCounter()
        counter.add()
        counter.add(2)
        #expect(counter.value == 3)
    }
}
