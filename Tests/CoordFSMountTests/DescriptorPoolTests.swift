import LinuxSystem
@testable import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's descriptors shared by the inode table and the files open through the mount
/// (`DescriptorPool`, `OpenFileBudget`): the owner and root leave the others room, the others
/// leave them room, and the table gives up descriptors as files open.
@Suite struct DescriptorPoolTests {
    /// 1000 descriptors, at most 600 for items: 125 stay for items, 875 for open files.
    static func pool() -> DescriptorPool { DescriptorPool(size: 1000, inodeCeiling: 600) }

    @Test func theItemsBudgetShrinksAsFilesOpenDownToItsFloor() {
        let pool = Self.pool()
        let budget = OpenFileBudget(perUser: 100, owner: 1000, pool: pool)
        #expect(pool.inodeBudget == 600 && pool.inodeFloor == 125 && pool.openFileRoom == 875)
        #expect(!pool.pressesOnInodes)
        let places = (0..<500).compactMap { _ in budget.take(for: 0) }
        #expect(places.count == 500 && pool.inodeBudget == 500 && pool.pressesOnInodes)
        let more = (0..<275).compactMap { _ in budget.take(for: 1000) }
        #expect(more.count == 275 && pool.inodeBudget == 225)
        for place in places + more { budget.giveBack(place) }
        #expect(pool.openFiles.load(ordering: .relaxed) == 0 && pool.inodeBudget == 600)
    }

    /// Root and the owner together stop one user's share short of the room; another user then
    /// opens its whole share, and nobody a second one.
    @Test func theOwnerAndRootLeaveTheOthersAShare() {
        let budget = OpenFileBudget(perUser: 100, owner: 1000, pool: Self.pool())
        #expect(budget.sideLimit == 775)
        var privileged = (0..<400).compactMap { _ in budget.take(for: 0) }
        privileged += (0..<400).compactMap { _ in budget.take(for: 1000) }
        #expect(privileged.count == 775 && !budget.hasRoom(for: 0) && budget.take(for: 1000) == nil)
        #expect(budget.hasRoom(for: 7))
        let theirs = (0..<150).compactMap { _ in budget.take(for: 7) }
        #expect(theirs.count == 100)
        #expect(budget.take(for: 8) == nil, "the pool is full")
        budget.giveBack(privileged.removeLast())
        #expect(budget.take(for: 8)?.user == 8)
        #expect(budget.openByUser == [7: 100, 8: 1])
    }

    /// The other users together stop one user's share short of the room: root still opens.
    @Test func theOtherUsersLeaveTheOwnerAndRootAShare() {
        let budget = OpenFileBudget(perUser: 100, owner: 1000, pool: Self.pool())
        var theirs: [OpenFileBudget.Place] = []
        for user in UInt32(10)..<UInt32(20) { theirs += (0..<100).compactMap { _ in budget.take(for: user) } }
        #expect(theirs.count == 775)
        #expect(!budget.hasRoom(for: 19) && budget.take(for: 19) == nil)
        let privileged = (0..<200).compactMap { _ in budget.take(for: 0) }
        #expect(privileged.count == 100)
    }

    /// Items looked up while the table was far from full keep their descriptors for life (no
    /// handle taken); once open files press the table, they are given handles and evicted,
    /// and open again by them.
    @Test func itemsKeptForLifeGiveUpTheirDescriptorsWhenFilesPress() throws {
        let backing = try FreshBacking("coordfs-pool")
        defer { backing.remove() }
        let pool = Self.pool()
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 600, pool: pool)
        try #require(table.usesHandles, "file handles are not available here (CAP_DAC_READ_SEARCH)")
        var items: [Inode] = []
        for index in 0..<290 {
            let name = "f\(index)"
            let made = open(backing.path + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            try #require(made >= 0)
            close(made)
            let (fd, info) = try table.openChild(named: name, in: table.root)
            items.append(table.remember(fd: fd, info: info, in: table.root, name: name))
        }
        #expect(table.openDescriptors == 290)
        let budget = OpenFileBudget(perUser: 100, owner: 1000, pool: pool)
        let places = (0..<775).compactMap { _ in budget.take(for: 0) }
        table.keepWithinBudget()
        #expect(table.openDescriptors <= pool.inodeBudget, "\(table.openDescriptors) of \(pool.inodeBudget)")
        for item in items {
            var info = stat()
            let found = try table.withFD(item) { fd throws(Errno) in fstat(fd, &info) == 0 }
            #expect(found && UInt64(info.st_ino) == item.number)
        }
        #expect(table.openDescriptors <= pool.inodeBudget + 1)
        for place in places { budget.giveBack(place) }
    }
}
