@testable import CoordFSMount
import Testing

/// The lock table a host of a shared store keeps for its programs, held to what Linux's
/// fs/locks.c does for a local filesystem: POSIX byte ranges per owner (conflicts, splits,
/// merges, dropped at any close by the process), flock locks per open file description (shared,
/// exclusive, converted, dropped with the open), the two kinds apart, and the deadlock check.
@Suite struct LockTableTests {
    static let file = NodeID(42)
    static let a = LockOwner(0xA), b = LockOwner(0xB), c = LockOwner(0xC)

    static func posix(
        _ owner: LockOwner, _ type: LockType, _ start: Int64, _ end: Int64, handle: UInt64 = 1,
        node: NodeID = file
    ) -> LockRequest {
        LockRequest(
            node: node, handle: handle, kind: .posix, owner: owner, type: type, range: LockRange(start, end),
            pid: Int32(truncatingIfNeeded: owner.rawValue), path: type == .unlock ? "" : "dir/file")
    }

    static func flock(_ owner: LockOwner, _ type: LockType, node: NodeID = file) -> LockRequest {
        LockRequest(
            node: node, handle: owner.rawValue, kind: .flock, owner: owner, type: type, range: .wholeFile, pid: 0,
            path: type == .unlock ? "" : "dir/file")
    }

    /// `owner`'s POSIX locks of the file, as "start-end r|w", in order of their start.
    static func ranges(_ table: LockTable, _ owner: LockOwner, node: NodeID = file) -> [String] {
        table.locks(on: node).filter { $0.kind == .posix && $0.owner == owner }.sorted {
            $0.range.start < $1.range.start
        }
        .map { "\($0.range) \($0.exclusive ? "w" : "r")" }
    }

    /// Applies `request` where nothing is in its way, as `FileLocks` does; whether it was.
    @discardableResult
    static func set(_ table: inout LockTable, _ request: LockRequest) -> Bool {
        _ = table.dropConverted(request)
        guard table.conflict(with: request) == nil else { return false }
        table.apply(request)
        return true
    }

    // MARK: POSIX ranges

    @Test func overlappingRangesOfOtherOwnersConflictWhenEitherIsExclusive() {
        var table = LockTable()
        #expect(Self.set(&table, Self.posix(Self.a, .exclusive, 0, 9)))
        #expect(table.conflict(with: Self.posix(Self.b, .shared, 5, 5))?.owner == Self.a)
        #expect(table.conflict(with: Self.posix(Self.b, .shared, 10, 19)) == nil, "the byte after the range is free")
        #expect(Self.set(&table, Self.posix(Self.b, .shared, 20, 29)))
        #expect(Self.set(&table, Self.posix(Self.c, .shared, 25, 40)), "shared locks share")
        #expect(table.conflict(with: Self.posix(Self.a, .exclusive, 28, 28))?.range == LockRange(20, 29))
        #expect(table.conflict(with: Self.posix(Self.a, .exclusive, 0, 3)) == nil, "an owner is never in its own way")
        #expect(
            table.conflict(with: Self.posix(Self.b, .unlock, 0, LockRange.endOfFile)) == nil,
            "an unlock waits for nobody")
    }

    @Test func aLockToTheEndOfTheFileReachesPastIt() {
        var table = LockTable()
        #expect(Self.set(&table, Self.posix(Self.a, .exclusive, 100, LockRange.endOfFile)))
        #expect(table.conflict(with: Self.posix(Self.b, .shared, 1 << 40, 1 << 40)) != nil)
        Self.set(&table, Self.posix(Self.a, .unlock, 200, LockRange.endOfFile))
        #expect(Self.ranges(table, Self.a) == ["100-199 w"])
        #expect(table.conflict(with: Self.posix(Self.b, .exclusive, 200, LockRange.endOfFile)) == nil)
    }

    @Test func unlockingTheMiddleSplitsALock() {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .exclusive, 0, 99))
        Self.set(&table, Self.posix(Self.a, .unlock, 40, 59))
        #expect(Self.ranges(table, Self.a) == ["0-39 w", "60-99 w"])
        #expect(table.conflict(with: Self.posix(Self.b, .exclusive, 40, 59)) == nil)
    }

    @Test func anotherTypeOverPartOfALockReplacesThatPart() {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .exclusive, 0, 99))
        Self.set(&table, Self.posix(Self.a, .shared, 20, 29))
        #expect(Self.ranges(table, Self.a) == ["0-19 w", "20-29 r", "30-99 w"])
        #expect(Self.set(&table, Self.posix(Self.b, .shared, 22, 25)), "downgraded: readers share that part")
        #expect(table.conflict(with: Self.posix(Self.b, .shared, 30, 30)) != nil)
    }

    @Test func locksOfOneTypeThatTouchOrOverlapMerge() {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .shared, 0, 9))
        Self.set(&table, Self.posix(Self.a, .shared, 20, 29))
        #expect(Self.ranges(table, Self.a) == ["0-9 r", "20-29 r"])
        Self.set(&table, Self.posix(Self.a, .shared, 10, 19))
        #expect(Self.ranges(table, Self.a) == ["0-29 r"], "adjoining on both sides")
        Self.set(&table, Self.posix(Self.a, .shared, 25, 49))
        #expect(Self.ranges(table, Self.a) == ["0-49 r"], "overlapping")
        Self.set(&table, Self.posix(Self.a, .exclusive, 50, 59))
        #expect(Self.ranges(table, Self.a) == ["0-49 r", "50-59 w"], "another type adjoining stays apart")
        #expect(table.holding(Self.a, .posix, on: Self.file) == true)
        Self.set(&table, Self.posix(Self.a, .unlock, 50, 59))
        #expect(table.holding(Self.a, .posix, on: Self.file) == false)
        #expect(table.holding(Self.b, .posix, on: Self.file) == nil)
    }

    @Test func aCloseByTheProcessDropsAllItsLocksOfTheFile() {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .exclusive, 0, 9, handle: 1))
        Self.set(&table, Self.posix(Self.a, .shared, 100, 109, handle: 2))
        Self.set(&table, Self.posix(Self.b, .shared, 200, 209, handle: 3))
        Self.set(&table, Self.flock(Self.a, .exclusive))
        Self.set(&table, Self.posix(Self.a, .exclusive, 0, 9, node: NodeID(7)))
        // POSIX: a close of any descriptor of the file, whichever it locked through.
        let dropped = table.removePOSIX(of: Self.a, on: Self.file)
        #expect(dropped)
        #expect(Self.ranges(table, Self.a).isEmpty)
        #expect(Self.ranges(table, Self.b) == ["200-209 r"], "another process's stay")
        #expect(
            table.locks(on: Self.file).contains { $0.kind == .flock && $0.owner == Self.a },
            "a flock lock is the open's, not the process's")
        #expect(Self.ranges(table, Self.a, node: NodeID(7)) == ["0-9 w"], "its locks of other files stay")
        let droppedAgain = table.removePOSIX(of: Self.a, on: Self.file)
        #expect(!droppedAgain, "nothing left to drop")
    }

    @Test func anOpensReleaseDropsTheOFDLocksSetThroughIt() {
        var table = LockTable()
        // An OFD lock's owner is its open: no FLUSH names it, its release does.
        let ofd = LockOwner(0x0FD)
        Self.set(&table, Self.posix(ofd, .exclusive, 0, 0, handle: 5))
        // A process that locked through open 6, closed a descriptor (FLUSH), and locked again
        // through open 7: the release of open 6 leaves its new lock.
        Self.set(&table, Self.posix(Self.a, .shared, 10, 10, handle: 6))
        let closed = table.removePOSIX(of: Self.a, on: Self.file)
        #expect(closed)
        Self.set(&table, Self.posix(Self.a, .shared, 20, 20, handle: 7))
        let releasedFirst = table.release(6, on: Self.file, flockOwner: nil)
        #expect(!releasedFirst)
        #expect(Self.ranges(table, Self.a) == ["20-20 r"])
        let releasedOFD = table.release(5, on: Self.file, flockOwner: nil)
        #expect(releasedOFD)
        #expect(Self.ranges(table, ofd).isEmpty)
    }

    // MARK: flock

    @Test func flockLocksShareOrExcludeByOpenFile() {
        var table = LockTable()
        let first = LockOwner(1), second = LockOwner(2), third = LockOwner(3)
        #expect(Self.set(&table, Self.flock(first, .shared)))
        #expect(Self.set(&table, Self.flock(second, .shared)))
        #expect(table.conflict(with: Self.flock(third, .exclusive))?.owner == first)
        #expect(table.holdsAlready(Self.flock(first, .shared)), "asked again: granted at once")
        #expect(!table.holdsAlready(Self.flock(first, .exclusive)))
        // Converting drops the old lock first (Linux): a conversion that then waits has lost it.
        let converted = table.dropConverted(Self.flock(first, .exclusive))
        #expect(converted)
        #expect(table.conflict(with: Self.flock(first, .exclusive))?.owner == second)
        #expect(!table.locks(on: Self.file).contains { $0.owner == first })
        let released = table.release(2, on: Self.file, flockOwner: second)
        #expect(released)
        #expect(Self.set(&table, Self.flock(first, .exclusive)))
        Self.set(&table, Self.flock(first, .unlock))
        #expect(table.locks(on: Self.file).isEmpty)
    }

    @Test func flockAndPOSIXLocksOfOneFileDoNotConflict() {
        var table = LockTable()
        Self.set(&table, Self.flock(Self.a, .exclusive))
        #expect(table.conflict(with: Self.posix(Self.b, .exclusive, 0, LockRange.endOfFile)) == nil)
        Self.set(&table, Self.posix(Self.b, .exclusive, 0, LockRange.endOfFile))
        #expect(
            table.conflict(with: Self.flock(Self.c, .shared))?.owner == Self.a,
            "only the flock lock is in a flock's way")
    }

    // MARK: Waiting and deadlocks

    @Test func aWaitThatClosesACycleOfOwnersIsADeadlock() throws {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .exclusive, 0, 0))
        Self.set(&table, Self.posix(Self.b, .exclusive, 1, 1))
        let bWaits = Self.posix(Self.b, .exclusive, 0, 0)
        table.enqueue(1, bWaits)
        let aAsks = Self.posix(Self.a, .exclusive, 1, 1)
        let blocker = try #require(table.conflict(with: aAsks))
        #expect(table.wouldDeadlock(aAsks, blockedBy: blocker))
        // Through a third owner, and another file.
        Self.set(&table, Self.posix(Self.c, .exclusive, 0, 0, node: NodeID(7)))
        table.dequeue(1, on: Self.file)
        table.enqueue(2, Self.posix(Self.b, .exclusive, 0, 0, node: NodeID(7)))
        table.enqueue(3, Self.posix(Self.c, .exclusive, 0, 0))
        #expect(table.wouldDeadlock(aAsks, blockedBy: blocker))
        // Nobody waits for A: no cycle.
        table.dequeue(3, on: Self.file)
        #expect(!table.wouldDeadlock(aAsks, blockedBy: blocker))
        // flock waits are never checked (Linux neither).
        #expect(!table.wouldDeadlock(Self.flock(Self.a, .exclusive), blockedBy: blocker))
        #expect(table.queue(of: NodeID(7)).map { $0.number } == [2])
    }

    @Test func heldFilesAreExclusiveWhereAnyLockIs() {
        var table = LockTable()
        Self.set(&table, Self.posix(Self.a, .shared, 0, 0))
        #expect(table.heldFiles().map { $0.path } == ["dir/file"] && table.heldFiles().map { $0.exclusive } == [false])
        Self.set(&table, Self.posix(Self.b, .exclusive, 5, 5))
        #expect(table.heldFiles().map { $0.exclusive } == [true])
        let droppedA = table.removePOSIX(of: Self.a, on: Self.file),
            droppedB = table.removePOSIX(of: Self.b, on: Self.file)
        #expect(droppedA && droppedB)
        #expect(table.heldFiles().isEmpty)
    }
}
