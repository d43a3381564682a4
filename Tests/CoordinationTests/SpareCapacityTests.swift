@testable import Coordination
import Testing

/// Tables that grew for a crowd give their storage back once it has gone: a burst of watches
/// must not keep its memory for the daemon's life.
@Suite struct SpareCapacityTests {
    @Test func aTableNearlyEmptiedGivesBackItsStorage() {
        var table = Dictionary(uniqueKeysWithValues: (0..<100_000).map { ($0, "value \($0)") })
        #expect(table.capacity >= 100_000)
        for key in 10..<100_000 {
            table[key] = nil
            table.releaseSpareCapacity()
        }
        #expect(table.capacity < 1024, "capacity \(table.capacity)")
        #expect(table == Dictionary(uniqueKeysWithValues: (0..<10).map { ($0, "value \($0)") }))
    }

    @Test func aSmallOrStillFullEnoughTableKeepsItsStorage() {
        var small = Dictionary(uniqueKeysWithValues: (0..<500).map { ($0, $0) })
        let smallCapacity = small.capacity
        for key in 1..<500 { small[key] = nil }
        small.releaseSpareCapacity()
        #expect(small.capacity == smallCapacity && small.count == 1)

        var busy = Dictionary(uniqueKeysWithValues: (0..<10_000).map { ($0, $0) })
        let busyCapacity = busy.capacity
        for key in 0..<5_000 { busy[key] = nil }
        busy.releaseSpareCapacity()
        #expect(busy.capacity == busyCapacity && busy.count == 5_000)
    }

    /// C16: presenters registered by the ten thousand and then unregistered (a connection's
    /// watches as it closes) leave the engine's table small again, the rest still found.
    @Test func theEnginesPresentersShrinkOnceTheyGo() throws {
        let engine = CoordinationEngine()
        let ids = (0..<20_000).map { number in
            engine.addPresenter(
                PresenterRecord(owner: .process(Int32(number % 7)), path: ItemPath("/d/f\(number % 2_000)")!))
        }
        #expect(engine.presenters.capacity >= 20_000)
        engine.removePresenters(Array(ids.dropFirst(16)))
        #expect(engine.presenters.count == 16)
        #expect(engine.presenters.capacity < 1024, "capacity \(engine.presenters.capacity)")
        for id in ids.prefix(16) { #expect(engine.presenter(id) != nil) }
        let kept = try #require(engine.presenter(ids[3]))
        #expect(kept.path == ItemPath("/d/f3"))
    }
}
