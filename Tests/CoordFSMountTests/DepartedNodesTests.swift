@testable import CoordFSMount
import Testing

/// The places of forgotten nodes are kept for the last `capacity` of them, oldest out first.
@Suite struct DepartedNodesTests {
    static func record(_ number: UInt64) -> DepartedNodes.Record {
        DepartedNodes.Record(parent: NodeID(1), name: "n\(number)", device: 7, number: number, isDirectory: false)
    }

    @Test func theOldestGoPastTheCapacity() {
        var departed = DepartedNodes(capacity: 3)
        for id in UInt64(10)..<15 { departed.add(NodeID(id), Self.record(id)) }
        #expect(departed.count == 3)
        #expect(departed.record(of: NodeID(10)) == nil && departed.record(of: NodeID(11)) == nil)
        #expect(departed.record(of: NodeID(14))?.name == "n14" && departed.record(of: NodeID(12))?.number == 12)
    }

    @Test func aNodeKnownAgainIsNoLongerRemembered() {
        var departed = DepartedNodes(capacity: 3)
        departed.add(NodeID(5), Self.record(5))
        departed.remove(NodeID(5))
        #expect(departed.record(of: NodeID(5)) == nil && departed.count == 0)
        // Its slot in the order is reused without taking another's record.
        for id in UInt64(6)..<9 { departed.add(NodeID(id), Self.record(id)) }
        #expect(departed.count == 3 && departed.record(of: NodeID(6)) != nil)
    }

    /// An item found by name again gets back the id it departed under (its kernel handles name
    /// that id); an item of another type behind the same inode number does not.
    @Test func anItemFoundAgainGetsItsIdBack() {
        var departed = DepartedNodes(capacity: 3)
        departed.add(NodeID(5), Self.record(40))
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: true, parent: NodeID(1), name: "n40") == nil)
        #expect(departed.reclaim(device: 7, number: 41, isDirectory: false, parent: NodeID(1), name: "n41") == nil)
        #expect(
            departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(1), name: "n40") == NodeID(5))
        #expect(departed.record(of: NodeID(5)) == nil && departed.count == 0)
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(1), name: "n40") == nil)
    }

    /// The ring passing an id an item departed under before does not forget the item's later id.
    @Test func theLatestIdOfAnItemIsKept() {
        var departed = DepartedNodes(capacity: 2)
        departed.add(NodeID(5), Self.record(40))
        departed.add(NodeID(6), Self.record(40))
        departed.add(NodeID(7), Self.record(50))  // passes 5
        #expect(
            departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(1), name: "n40") == NodeID(6))
        #expect(
            departed.reclaim(device: 7, number: 50, isDirectory: false, parent: NodeID(1), name: "n50") == NodeID(7))
    }

    /// Found at another place, the inode number may be another item's: no id is given back,
    /// and the record stays for the handles of the item it was.
    @Test func anItemFoundElsewhereIsNotGivenAnOldId() {
        var departed = DepartedNodes(capacity: 3)
        departed.add(NodeID(5), Self.record(40))
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(1), name: "other") == nil)
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(2), name: "n40") == nil)
        #expect(departed.record(of: NodeID(5)) != nil)
    }

    /// A file with hard links is found again by any of the places it departed from: the one it
    /// was known by, or another it was reached by (its known name may be gone by then).
    @Test func aFileWithLinksIsReclaimedAtAnyOfItsPlaces() {
        var departed = DepartedNodes(capacity: 3)
        var record = Self.record(40)
        record.others = [Inode.Place(parent: NodeID(2), name: "link")]
        departed.add(NodeID(5), record)
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(2), name: "other") == nil)
        #expect(
            departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(2), name: "link") == NodeID(5))
        #expect(departed.count == 0)
    }

    /// An id that departed, came back and departed again keeps its later record when the ring
    /// passes the slot of its first departure.
    @Test func anIdThatDepartedAgainOutlivesItsFirstSlot() {
        var departed = DepartedNodes(capacity: 3)
        departed.add(NodeID(5), Self.record(40))
        departed.remove(NodeID(5))
        departed.add(NodeID(6), Self.record(41))
        departed.add(NodeID(5), Self.record(40))
        departed.add(NodeID(7), Self.record(42))  // the ring passes 5's first slot
        #expect([NodeID(5), NodeID(6), NodeID(7)].allSatisfy { departed.record(of: $0) != nil })
        departed.add(NodeID(8), Self.record(43))  // and 6's: the oldest goes
        #expect(departed.record(of: NodeID(6)) == nil && departed.count == 3)
    }

    /// A stable id is its item's own: its record is for its handles (`InodeTable.revive`), never
    /// given back by name nor dropped by its item's inode number, which only counted ids are
    /// looked up by; its next departure replaces it.
    @Test func aStableIdIsNotLookedUpByItsItem() {
        var departed = DepartedNodes(capacity: 3)
        let stable = NodeID(40 | 9 << 32), counted = NodeID(5)
        #expect(stable.isStable && !counted.isStable)
        departed.add(stable, Self.record(40))
        departed.remove(device: 7, number: 40)
        #expect(departed.record(of: stable)?.name == "n40")
        #expect(departed.reclaim(device: 7, number: 40, isDirectory: false, parent: NodeID(1), name: "n40") == nil)
        // A counted id the same inode number departed under is still dropped by it.
        departed.add(counted, Self.record(40))
        departed.remove(device: 7, number: 40)
        #expect(departed.record(of: counted) == nil && departed.record(of: stable) != nil)
        departed.add(
            stable, DepartedNodes.Record(parent: NodeID(2), name: "moved", device: 7, number: 40, isDirectory: false))
        #expect(departed.record(of: stable)?.name == "moved" && departed.count == 1)
    }
}
