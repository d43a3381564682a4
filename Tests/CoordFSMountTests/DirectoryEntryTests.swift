@testable import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// readdir(3) records are as long as their names. The mount once copied `d_name` whole and
/// crashed when the last record of a read ended just before an unmapped page.
@Suite struct DirectoryEntryRecords {
    @Test func aShortRecordJustBeforeAnUnmappedPageIsReadInPlace() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        #expect(mapping != MAP_FAILED)
        defer { munmap(mapping, 2 * page) }
        #expect(mprotect(mapping + page, page, PROT_NONE) == 0)

        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        let name = Array("ab".utf8CString)
        let length = (nameOffset + name.count + 7) & ~7
        let record = mapping + page - length  // ends where the guard page begins
        record.initializeMemory(as: UInt8.self, repeating: 0, count: length)
        record.storeBytes(of: 4242, toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_ino)!, as: ino_t.self)
        record.storeBytes(of: 99, toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_off)!, as: off_t.self)
        record.storeBytes(
            of: UInt16(length), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        record.storeBytes(
            of: UInt8(DT_REG), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_type)!, as: UInt8.self)
        name.withUnsafeBytes { (record + nameOffset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }

        let entry = DirectoryEntry(record.assumingMemoryBound(to: dirent.self))
        #expect(entry.name == "ab")
        #expect(entry.number == 4242)
        #expect(entry.next == 99)
        #expect(entry.type == S_IFREG)
    }
}
