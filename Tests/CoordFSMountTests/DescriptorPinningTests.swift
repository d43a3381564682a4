import CLinux
import LinuxSystem
@testable import CoordFSMount
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A node's descriptor, pinned without the table's lock (`InodeTable.withFD`), is never closed
/// under the request using it, while other requests evict descriptors past the table's budget
/// and open them again (`DescriptorSlots`).
@Suite struct DescriptorPinningTests {
    @Test func aPinnedDescriptorStaysTheNodesWhileOthersAreEvicted() throws {
        let backing = try FreshBacking("coordfs-pins")
        defer { backing.remove() }
        // Far fewer descriptors than nodes: most pins find none and open one again.
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 24)
        try #require(table.usesHandles, "needs file handles (root, and a filesystem that has them)")
        let nodes = try (0..<200).map { index throws(Errno) -> Inode in
            let name = "f\(index)"
            close(open(backing.path + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
            let (fd, info) = try table.openChild(named: name, in: table.root)
            return table.remember(fd: fd, info: info, in: table.root, name: name)
        }
        let wrong = Atomic<Int>(0), pinned = Atomic<Int>(0)
        let threads = 4, rounds = 12_000
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var seed = UInt64(thread + 1) &* 0x9E37_79B9_7F4A_7C15
            for _ in 0..<rounds {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let node = nodes[Int(seed >> 33) % nodes.count]
                table.withFD(node, orElse: { _ in _ = wrong.add(1, ordering: .relaxed) }) { fd in
                    pinned.add(1, ordering: .relaxed)
                    // Held a moment, while the other threads evict: still the node's slot's
                    // (an evicted descriptor is closed later, by another thread), still open,
                    // still this node's.
                    for _ in 0..<3 {
                        var info = stat()
                        if !table.holdsDescriptor(node) || node.descriptor.load(ordering: .relaxed) != fd
                            || fstat(fd, &info) != 0 || UInt64(info.st_ino) != node.number
                        {
                            wrong.add(1, ordering: .relaxed)
                        }
                        sched_yield()
                    }
                }
            }
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
        #expect(pinned.load(ordering: .relaxed) == threads * rounds)
        #expect(nodes.allSatisfy { $0.pins.load(ordering: .relaxed) == 0 }, "every pin counted out")
        #expect(table.openDescriptors <= 24 + threads, "within the budget: \(table.openDescriptors)")
        // Forgotten while pinned, a node's descriptor closes with its last pin.
        let last = nodes[0]
        table.withFD(last, orElse: { _ in _ = Issue.record("not opened") }) { _ in
            table.forget(last.id, 1)
            #expect(table.holdsDescriptor(last), "pinned: kept")
        }
        #expect(!table.holdsDescriptor(last), "closed with its last pin")
        // Forgotten while other threads pin and unpin it: closed once the last pin is out,
        // whichever of the two came last.
        for node in nodes[1..<40] {
            DispatchQueue.concurrentPerform(iterations: 3) { thread in
                if thread == 0 {
                    table.forget(node.id, 1)
                } else {
                    for _ in 0..<50 { table.withFD(node, orElse: { _ in () }) { _ in sched_yield() } }
                }
            }
            #expect(!table.holdsDescriptor(node), "a forgotten node's descriptor left open")
        }
    }
}
