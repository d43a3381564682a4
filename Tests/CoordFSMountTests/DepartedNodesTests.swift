@testable import CoordFSMount
import Testing

/// The places of forgotten nodes are kept for the last `capacity` of them, oldest out first.
@Suite struct DepartedNodesTests {
    static func record(_ number: UInt64) -> DepartedNodes.Record {
        DepartedNodes.Record(parent: 1, name: "n\(number)", device: 7, number: number, isDirectory: false)
    }

    @Test func theOldestGoPastTheCapacity() {
        let departed = DepartedNodes(capacity: 3)
        for id in UInt64(10)..<15 { departed.add(id, Self.record(id)) }
        #expect(departed.count == 3)
        #expect(departed.record(of: 10) == nil && departed.record(of: 11) == nil)
        #expect(departed.record(of: 14)?.name == "n14" && departed.record(of: 12)?.number == 12)
    }

    @Test func aNodeKnownAgainIsNoLongerRemembered() {
        let departed = DepartedNodes(capacity: 3)
        departed.add(5, Self.record(5))
        departed.remove(5)
        #expect(departed.record(of: 5) == nil && departed.count == 0)
        // Its slot in the order is reused without taking another's record.
        for id in UInt64(6)..<9 { departed.add(id, Self.record(id)) }
        #expect(departed.count == 3 && departed.record(of: 6) != nil)
    }
}
