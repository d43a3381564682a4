import LinuxSystem
@testable import CoordFSMount
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's forgets (`InodeTable.forget`): a node goes with its last lookup, its descriptor
/// with it, and it is remembered as departed.
@Suite struct ForgottenNodesTests {
    /// A BATCH_FORGET of more nodes than one lock's worth, with nodes still looked up, the root
    /// and an id never given among them: exactly the nodes counted down to zero go.
    @Test func aBatchForgetsEachNodeItCountsDownToZero() throws {
        let backing = try FreshBacking("coordfs-forgets")
        defer { backing.remove() }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1_000)
        let count = InodeTable.forgetsPerLock * 3 + 5
        let nodes = try (0..<count).map { index throws(Errno) -> Inode in
            let name = "f\(index)"
            close(open(backing.path + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
            let (fd, info) = try table.openChild(named: name, in: table.root)
            return table.remember(fd: fd, info: info, in: table.root, name: name)
        }
        // Every third node was looked up twice: one forget leaves it known.
        for node in nodes.enumerated() where node.offset % 3 == 0 {
            let (fd, info) = try table.openChild(named: "f\(node.offset)", in: table.root)
            #expect(table.remember(fd: fd, info: info, in: table.root, name: "f\(node.offset)") === node.element)
        }
        let descriptorsBefore = table.openDescriptors
        var batch = nodes.map { ($0.id, UInt64(1)) }
        batch.insert((InodeTable.rootID, 1), at: 7)
        batch.insert((NodeID(999_999), 1), at: 40)
        table.forget(batch)

        let kept = nodes.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        let gone = nodes.enumerated().filter { $0.offset % 3 != 0 }.map(\.element)
        #expect(kept.allSatisfy { table[$0.id] === $0 && table.holdsDescriptor($0) })
        #expect(
            gone.allSatisfy {
                table[$0.id] == nil && !table.holdsDescriptor($0) && $0.isForgotten.load(ordering: .relaxed)
            })
        #expect(table.openDescriptors == descriptorsBefore - gone.count, "each gone node's descriptor closed")
        #expect(table[InodeTable.rootID] === table.root)
        #expect(table.count == kept.count + 1)
        // Departed, not lost: each comes back by its id with the item it was.
        for node in gone.prefix(5) {
            let (revived, info) = try table.revive(node.id, countingLookup: true)
            #expect(revived.id == node.id && UInt64(info.st_ino) == node.number)
        }
    }
}
