@testable import FileVersions
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A write is stale only against its own writer's last read or write of the item.
@Suite struct ReadRecordsTests {
    func stamp(_ inode: UInt64, _ modified: Int) -> ContentStamp {
        var info = stat()
        info.st_ino = UInt(inode)
        info.st_mtim.tv_sec = modified
        return ContentStamp(info)
    }

    @Test func theLostUpdateIsStaleAndNothingElse() {
        let records = ReadRecords()
        let first = stamp(1, 100), afterA = stamp(2, 101)
        records.saw(first, of: "doc", by: 10)  // A reads
        records.saw(first, of: "doc", by: 20)  // B reads
        #expect(!records.isStale("doc", by: 10, replacing: first))  // A writes what follows its read
        records.saw(afterA, of: "doc", by: 10)
        #expect(records.isStale("doc", by: 20, replacing: afterA))  // B writes from its old read
        #expect(!records.isStale("doc", by: 30, replacing: afterA))  // C never read it: blind, not stale
        #expect(!records.isStale("other", by: 20, replacing: afterA))
        // B reads again: its next write follows that read.
        records.saw(afterA, of: "doc", by: 20)
        #expect(!records.isStale("doc", by: 20, replacing: afterA))
    }

    @Test func pastTheCapacityTheOldestAreForgotten() {
        let records = ReadRecords(capacity: 100)
        for reader in 0..<101 { records.saw(stamp(1, 1), of: "doc", by: Int64(reader)) }
        #expect(records.count <= 100)
        #expect(records.lastSeen(of: "doc", by: 0) == nil && records.lastSeen(of: "doc", by: 100) != nil)
    }

    @Test func aSessionsProcessesAreOneReader() {
        let me = getpid()
        #expect(ReaderIdentity.session.reader(pid: me, uid: 0) == Int64(getsid(me)))
        #expect(ReaderIdentity.processGroup.reader(pid: me, uid: 0) == Int64(getpgid(me)))
        #expect(ReaderIdentity.process.reader(pid: me, uid: 0) == Int64(me))
        #expect(ReaderIdentity.user.reader(pid: me, uid: 1000) != ReaderIdentity.user.reader(pid: me, uid: 0))
        #expect(ReaderIdentity.session.reader(pid: Int32.max, uid: 0) == nil)
    }
}
