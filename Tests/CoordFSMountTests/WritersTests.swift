import Coordination
@testable import CoordFSMount
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Who writes a file, as a writer's own calls on it need to know (`Inode.isWritten(by:)`), and
/// what a create holds (`Filesystem.createKind`).
@Suite struct WritersTests {
    private func inode() -> Inode {
        Inode(id: NodeID(2), device: 1, number: 2, handle: nil, isDirectory: false, parent: NodeID(1), name: "f")
    }

    /// The processes writing a file through kernel passthrough, known until `lateClose` after
    /// their last open ended (fanotify reports their closes after the release): the first
    /// inline, others beside it; none counted twice as they come and go.
    @Test func processesWritingThroughTheKernelAreKnownUntilLateAfterTheirLastOpen() {
        var writers = KernelWriterProcesses()
        let late = Inode.lateClose
        func knows(_ process: Int32, at now: Int64) -> Bool { writers.has(process, now: now) }
        writers.began(10, now: 0)
        writers.began(10, now: 0)
        writers.began(11, now: 0)
        #expect(knows(10, at: 0) && knows(11, at: 0) && !knows(12, at: 0))
        writers.ended(10, now: 100)
        #expect(knows(10, at: 100 + late), "one of its two opens is left")
        writers.ended(10, now: 200)
        #expect(knows(10, at: 200 + late - 1), "ended lately")
        #expect(!knows(10, at: 200 + late) && !knows(10, at: 0), "late, and forgotten")
        // The first place free, a process known beside it is not counted a second time there.
        writers.began(11, now: 0)
        writers.ended(11, now: 300)
        #expect(knows(11, at: 300 + late), "one of its two opens is left")
        writers.ended(11, now: 400)
        #expect(!knows(11, at: 400 + late))
        writers.began(12, now: 0)
        writers.ended(12, now: 500)
        writers.began(13, now: 0)
        writers.ended(13, now: 500 + late)  // forgets 12, known longer
        #expect(!knows(12, at: 500) && knows(13, at: 500 + late))
        // A first writer known too long gives its place to the next one.
        var again = KernelWriterProcesses()
        again.began(20, now: 0)
        again.ended(20, now: 0)
        again.began(21, now: late)
        let (first, next) = (again.has(20, now: late), again.has(21, now: late))
        #expect(!first && next)
    }

    @Test func eachOfSeveralWritingProcessesIsKnownUntilItsLastRelease() {
        let file = inode()
        file.beganWriting(by: 10)
        file.beganWriting(by: 10)
        #expect(file.isWritten(onlyBy: 10) && file.isWritten(by: 10) && !file.isWritten(by: 11))
        file.beganWriting(by: 11)
        #expect(
            !file.isWritten(onlyBy: 10) && file.isWritten(by: 10) && file.isWritten(by: 11) && !file.isWritten(by: 12))
        file.endedWriting(by: 10)
        #expect(file.isWritten(by: 10), "one of its two opens is left")
        file.endedWriting(by: 10)
        #expect(!file.isWritten(by: 10) && file.isWritten(by: 11))
        file.endedWriting(by: 11)
        #expect(!file.isWritten(by: 11) && file.writers.load(ordering: .relaxed) == 0)
        #expect(file.sharedWriters.withLock { $0.isEmpty })
        // Alone again, it is the sole writer as before.
        file.beganWriting(by: 12)
        #expect(file.isWritten(onlyBy: 12) && file.isWritten(by: 12))
        file.endedWriting(by: 12)
        #expect(file.writers.load(ordering: .relaxed) == 0)
    }

    /// What fanotify reports of a file written through kernel passthrough carries the writer's
    /// process: its writes and closes are the mount's while it has the file open and for a
    /// while after its last release, however many closes come and whenever they are read (P9:
    /// the mount's own write is told once, as the mount's). Another process's are not.
    @Test("P9 a writer's closes read after its release count as the mount's, each of them")
    func aWritersClosesAfterItsReleaseCountAsTheMountsEachOfThem() {
        let file = inode()
        file.beganWritingThroughTheKernel(by: 20)
        #expect(file.isWrittenThroughTheKernel(by: 20) && !file.isWrittenThroughTheKernel(by: 21))
        file.endedWritingThroughTheKernel(by: 20)
        #expect(file.kernelWriters.load(ordering: .relaxed) == 0)
        // The kernel's close of the backing file, then another close of the same open (or two
        // merged into one and read late): each is still the writer's.
        #expect(file.isWrittenThroughTheKernel(by: 20))
        #expect(file.isWrittenThroughTheKernel(by: 20), "a second close was taken for a change from outside")
        #expect(!file.isWrittenThroughTheKernel(by: 21))
    }

    @Test func aCreateHoldsWhatAnOpenWithItsFlagsHolds() {
        // SQLite's -wal and -shm: made read-write and kept open, writers in place (U2).
        #expect(Filesystem.createKind(O_RDWR | O_CREAT) == .writing(.sharingWriters))
        #expect(Filesystem.createKind(O_WRONLY | O_CREAT | O_EXCL) == .writing(.sharingWriters))
        #expect(Filesystem.createKind(O_WRONLY | O_CREAT | O_APPEND) == .writing(.appendingOnly))
        #expect(Filesystem.createKind(O_WRONLY | O_CREAT | O_TRUNC) == .writing([]))
        #expect(Filesystem.createKind(O_WRONLY | O_CREAT | O_APPEND | O_TRUNC) == .writing([]))
        // Made read-only, still a write: it makes the item.
        #expect(Filesystem.createKind(O_RDONLY | O_CREAT).isWrite)
        for flags in [O_RDWR, O_WRONLY, O_WRONLY | O_APPEND, O_RDWR | O_TRUNC] {
            #expect(Filesystem.createKind(flags | O_CREAT) == Filesystem.openKind(flags))
        }
    }

    @Test func anOpenWithoutOTruncOrOAppendWritesInPlace() {
        func open(_ flags: Int32, writes: Bool = true) -> OpenFile {
            OpenFile(fd: -1, inode: inode(), created: false, writes: writes, flags: flags)
        }
        #expect(open(O_RDWR).writesInPlace && open(O_WRONLY | O_CREAT).writesInPlace)
        #expect(!open(O_WRONLY | O_TRUNC).writesInPlace && !open(O_WRONLY | O_APPEND).writesInPlace)
        #expect(!open(O_RDONLY, writes: false).writesInPlace)
    }

    @Test func aBrokenOpenCoversItsOwnProcesssCallsOnItsItemOnly() throws {
        let opens = BrokenOpens()
        let item = try #require(ItemPath("/mnt/w.db-wal")), other = try #require(ItemPath("/mnt/w.db-shm"))
        #expect(!opens.covers([.write(item)], of: 10))
        let written = opens.add(10, item, writes: true)
        let read = opens.add(11, other, writes: false)
        #expect(opens.covers([.write(item, .contentIndependentMetadataOnly)], of: 10))
        #expect(opens.covers([.read(item)], of: 10))
        #expect(!opens.covers([.write(item)], of: 11), "another process's")
        #expect(!opens.covers([.write(other)], of: 10), "another item")
        #expect(!opens.covers([.write(item, .forMoving), .write(other, .forReplacing)], of: 10), "both items or none")
        #expect(opens.covers([.read(other)], of: 11) && !opens.covers([.write(other)], of: 11), "a read covers reads")
        opens.remove(written, of: 10)
        opens.remove(read, of: 11)
        #expect(!opens.covers([.write(item)], of: 10) && !opens.covers([.read(other)], of: 11))
    }
}
