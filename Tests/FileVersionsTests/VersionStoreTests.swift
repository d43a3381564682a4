import CLinux
@testable import FileVersions
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The store on a real directory: what it keeps and how, what it reads back after a restart,
/// and what its bounds take.
@Suite struct VersionStoreTests {
    /// A fresh directory (the tree's root) and its descriptor; removed after `body`.
    func withRoot(_ body: (String, Int32) throws -> Void) throws {
        let root = "/tmp/coordfs-versions-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fd = open(root, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try body(root, fd)
    }

    func write(_ text: String, _ path: String) throws { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
    func status(_ path: String) -> stat { var info = stat(); lstat(path, &info); return info }
    func content(_ store: VersionStore, _ record: VersionRecord) throws -> String {
        let fd = try store.openContent(record)
        defer { close(fd) }
        return String(decoding: FileHandle(fileDescriptor: fd).readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func aReplacedFileIsKeptByItsOwnInodeAndReadBackAfterARestart() throws {
        try withRoot { root, fd in
            try write("first\n", root + "/doc.txt")
            chmod(root + "/doc.txt", 0o640)
            let before = status(root + "/doc.txt")
            var record: VersionRecord?
            do {
                let store = try VersionStore(in: fd)
                let origin = VersionOrigin(pid: 42, uid: 1000, command: "editor")
                record = try store.keep(
                    .name("doc.txt", in: fd), item: "doc.txt", info: before, cause: .replaced,
                    replacedBy: origin, conflict: true
                ).get()
                // The content is the file's own inode: no copy was made.
                #expect(try store.contentStatus(record!).st_ino == before.st_ino)
                try write("second\n", root + "/doc.tmp")
                rename(root + "/doc.tmp", root + "/doc.txt")
                #expect(try content(store, record!) == "first\n")
                store.flush()
            }
            // Read back from the directory by a new store, as after a remount.
            let again = try VersionStore(in: fd)
            let versions = again.versions(of: "doc.txt")
            #expect(versions == [record!], "\(versions)")
            #expect(versions.first?.conflict == true && versions.first?.replacedBy?.command == "editor")
            #expect(try content(again, versions[0]) == "first\n")
            #expect(try again.contentStatus(versions[0]).st_mode & 0o777 == 0o640)
            #expect(again.totalBytes == 6)
        }
    }

    /// Two stores of one directory (hosts that share a store keep versions in one place) that
    /// keep versions in the same microsecond, by link and by copy: each takes an id of its own.
    @Test func twoStoresOfOneDirectoryNeverTakeOneID() throws {
        try withRoot { root, fd in
            let first = try VersionStore(in: fd), second = try VersionStore(in: fd)
            let now = VersionStore.now()
            var kept: [VersionRecord] = []
            for (index, store) in [first, second, first, second].enumerated() {
                try write("version \(index)\n", root + "/f\(index)")
                let info = status(root + "/f\(index)")
                if index < 2 {
                    kept.append(
                        try store.keep(.name("f\(index)", in: fd), item: "f", info: info, cause: .replaced, now: now)
                            .get())
                } else {
                    let file = open(root + "/f\(index)", O_RDONLY)
                    defer { close(file) }
                    kept.append(try store.keep(.copy(file), item: "f", info: info, cause: .truncated, now: now).get())
                }
            }
            #expect(Set(kept.map(\.id)).count == 4, "\(kept.map(\.id))")
            for (index, record) in kept.enumerated() {
                let store = index % 2 == 0 ? first : second
                #expect(try content(store, record) == "version \(index)\n")
            }
        }
    }

    @Test func aFileAboutToBeTruncatedIsCopiedWithItsOwnerModeAndTime() throws {
        try withRoot { root, fd in
            try write("0123456789", root + "/data")
            chmod(root + "/data", 0o600)
            chown(root + "/data", 65534, 65534)
            var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
            utimensat(AT_FDCWD, root + "/data", &times, 0)
            let info = status(root + "/data")
            let file = open(root + "/data", O_RDWR)
            defer { close(file) }
            let store = try VersionStore(in: fd)
            let record = try store.keep(.copy(file), item: "data", info: info, cause: .truncated).get()
            ftruncate(file, 0)
            #expect(try content(store, record) == "0123456789")
            let kept = try store.contentStatus(record)
            #expect(kept.st_ino != info.st_ino && kept.st_uid == 65534 && kept.st_mode & 0o777 == 0o600)
            #expect(kept.st_mtim.tv_sec == 1_000_000_000 && record.modified == 1_000_000_000)
        }
    }

    @Test func aCopyPastTheLimitIsNotKept() throws {
        try withRoot { root, fd in
            try write(String(repeating: "x", count: 4096), root + "/big")
            let file = open(root + "/big", O_RDONLY)
            defer { close(file) }
            let store = try VersionStore(in: fd, limits: VersionLimits(copyLimit: 1024))
            let result = store.keep(.copy(file), item: "big", info: status(root + "/big"), cause: .truncated)
            // On a filesystem with reflinks the copy costs nothing and is kept whatever its size.
            if case .failure(let failure) = result {
                #expect(failure == .tooLarge(size: 4096, limit: 1024))
                #expect(store.versions(of: "big").isEmpty)
            }
        }
    }

    @Test func theBoundsTakeTheOldestButNeverAConflictNobodyResolvedNorAPinnedOne() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd, limits: VersionLimits(perItem: 3, totalBytes: 1 << 20, grace: 0))
            var kept: [VersionRecord] = []
            let base = VersionStore.now()
            for n in 0..<6 {
                try write("version \(n)\n", root + "/f")
                kept.append(
                    try store.keep(
                        .name("f", in: fd), item: "f", info: status(root + "/f"), cause: .replaced,
                        conflict: n == 0, now: base + Double(n)
                    ).get())
                unlink(root + "/f")
                if n == 1 { store.update(kept[1].id, pinned: true) }
            }
            // The bounds are the store's queue's, once the saves are answered.
            store.flush()
            // The unresolved conflict (0) and the pinned (1) stay; of the rest the newest fill the count.
            let ids = store.versions(of: "f").map(\.id)
            #expect(ids == [kept[0].id, kept[1].id, kept[5].id], "\(ids)")
            // Resolved, the conflict is a version like any other: the next one takes its place.
            store.update(kept[0].id, resolved: true)
            try write("version 6\n", root + "/f")
            let last = try store.keep(
                .name("f", in: fd), item: "f", info: status(root + "/f"), cause: .replaced, now: base + 6
            ).get()
            store.flush()
            #expect(store.versions(of: "f").map(\.id) == [kept[1].id, kept[5].id, last.id])
            let left = try FileManager.default.contentsOfDirectory(atPath: root + "/.coordfs-versions/content")
            #expect(Set(left) == Set([kept[1], kept[5], last].map(\.id)), "\(left.sorted())")
            // What a new store reads back is what the bounds left, pins and resolutions too.
            let again = try VersionStore(in: fd, limits: VersionLimits(perItem: 3, totalBytes: 1 << 20, grace: 0))
            #expect(again.versions(of: "f").map(\.id) == [kept[1].id, kept[5].id, last.id])
            #expect(again.versions(of: "f").first?.pinned == true)
        }
    }

    @Test func pastTheTotalTheOldestOfAnyItemGo() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd, limits: VersionLimits(totalBytes: 25, grace: 0))
            let base = VersionStore.now()
            for (n, item) in ["a", "b", "c"].enumerated() {
                try write("0123456789", root + "/" + item)
                _ = try store.keep(
                    .name(item, in: fd), item: item, info: status(root + "/" + item), cause: .deleted,
                    now: base + Double(n)
                ).get()
            }
            store.flush()
            #expect(
                store.versions(of: "a").isEmpty && store.versions(of: "b").count == 1
                    && store.versions(of: "c").count == 1)
            #expect(store.totalBytes == 20)
        }
    }

    /// Versions past the total while younger than their grace stay; once the grace is over the
    /// bounds are looked at again by themselves, with no other version kept.
    @Test func pastTheTotalTheBoundsAreLookedAtAgainOnceTheGraceEnds() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd, limits: VersionLimits(totalBytes: 15, grace: 0.3))
            for item in ["a", "b"] {
                try write("0123456789", root + "/" + item)
                _ = try store.keep(
                    .name(item, in: fd), item: item, info: status(root + "/" + item), cause: .deleted
                ).get()
            }
            store.flush()
            #expect(store.totalBytes == 20, "both in their grace")
            let deadline = Date().addingTimeInterval(10)
            while store.totalBytes > 15 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
            #expect(store.totalBytes == 10 && store.versions(of: "a").isEmpty && store.versions(of: "b").count == 1)
        }
    }

    /// A file whose blocks reach past its size (preallocated with fallocate's KEEP_SIZE, as
    /// databases and fstests do) counts by what it holds: kept by a link, its version holds
    /// those blocks, which its size does not show.
    @Test func aPreallocatedFileCountsTheBlocksItHolds() throws {
        try withRoot { root, fd in
            let limits = VersionLimits(totalBytes: 1 << 20, grace: 0)
            let store = try VersionStore(in: fd, limits: limits)
            // Three files of 10 bytes, each with 768 KiB allocated past its end (mode 1: keep
            // the size), the last with 2 MiB.
            for (item, allocated) in [("a", 768 << 10), ("b", 768 << 10), ("c", 2 << 20)] {
                try write("0123456789", root + "/" + item)
                let file = open(root + "/" + item, O_RDWR)
                defer { close(file) }
                #expect(cfs_fallocate(file, 1, 0, off_t(allocated)) == 0)
                #expect(status(root + "/" + item).st_size == 10)
            }
            let base = VersionStore.now()
            for (n, item) in ["a", "b"].enumerated() {
                _ = try store.keep(
                    .name(item, in: fd), item: item, info: status(root + "/" + item), cause: .deleted,
                    now: base + Double(n)
                ).get()
            }
            store.flush()
            // Together past the total: the older goes.
            #expect(store.versions(of: "a").isEmpty && store.versions(of: "b").count == 1)
            #expect(store.totalBytes > 512 << 10 && store.totalBytes <= 1 << 20, "\(store.totalBytes)")
            #expect(store.versions(of: "b").first?.size == 10)
            // More than the store may hold: not kept.
            let result = store.keep(.name("c", in: fd), item: "c", info: status(root + "/c"), cause: .deleted)
            #expect(throws: VersionStore.NotKept.self) { try result.get() }
            // Read back, counted the same.
            let again = try VersionStore(in: fd, limits: limits)
            #expect(again.totalBytes == store.totalBytes)
        }
    }

    /// A file larger than all versions together may take is not kept: its removal frees its space.
    @Test func aFileLargerThanTheTotalIsNotKept() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd, limits: VersionLimits(totalBytes: 5))
            try write("0123456789", root + "/big")
            let result = store.keep(.name("big", in: fd), item: "big", info: status(root + "/big"), cause: .deleted)
            #expect(throws: VersionStore.NotKept.largerThanTheStore(size: 10, limit: 5)) { try result.get() }
            store.flush()
            #expect(store.versions(of: "big").isEmpty && store.totalBytes == 0)
        }
    }

    /// A version's line is written after its save has been answered: content whose line was
    /// lost with its process is removed at the next open, once old enough that no other store
    /// of the directory may still be about to write it; named content stays.
    @Test func contentNoRecordNamesIsRemovedAtTheNextOpenOnceOld() throws {
        try withRoot { root, fd in
            try write("named\n", root + "/a.txt")
            let store = try VersionStore(in: fd)
            let record = try store.keep(
                .name("a.txt", in: fd), item: "a.txt", info: status(root + "/a.txt"), cause: .deleted
            ).get()
            store.flush()
            let contents = root + "/.coordfs-versions/content/"
            try write("lost line\n", contents + "1234")
            try write("lost line\n", contents + "5678")
            var info = stat()
            // Young: left alone.
            _ = try VersionStore(in: fd)
            #expect(lstat(contents + "1234", &info) == 0 && lstat(contents + "5678", &info) == 0)
            let again = try VersionStore(in: fd, unnamedAge: -1)
            #expect(lstat(contents + "1234", &info) == -1 && lstat(contents + "5678", &info) == -1)
            #expect(again.versions(of: "a.txt").map(\.id) == [record.id])
            #expect(try content(again, again.versions(of: "a.txt")[0]) == "named\n")
        }
    }

    /// What the store's queue writes for versions kept together (their lines, a change of one,
    /// removals) it writes in the order asked for, whatever it gathered: what a new store reads
    /// back is what the first one ended with.
    @Test func linesGatheredForTheStoresQueueAreWrittenInTheOrderAskedFor() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd)
            var kept: [VersionRecord] = []
            for name in ["a", "b", "c", "d"] {
                try write(name, root + "/" + name)
                kept.append(
                    try store.keep(.name(name, in: fd), item: name, info: status(root + "/" + name), cause: .deleted)
                        .get())
            }
            store.update(kept[1].id, pinned: true)
            store.update(kept[1].id, resolved: true)
            // Taken back (a rename that failed): its content is gone before `remove` returns.
            #expect(store.remove(kept[2].id, now: true))
            var info = stat()
            #expect(lstat(root + "/.coordfs-versions/content/" + kept[2].id, &info) == -1)
            #expect(store.remove(kept[3].id))
            store.flush()
            #expect(lstat(root + "/.coordfs-versions/content/" + kept[3].id, &info) == -1)
            let again = try VersionStore(in: fd)
            #expect(again.all.map(\.id).sorted() == [kept[0].id, kept[1].id], "\(again.all)")
            #expect(again.version(kept[1].id)?.pinned == true && again.version(kept[1].id)?.resolved == true)
            #expect(try content(again, again.version(kept[0].id)!) == "a")
        }
    }

    @Test func aRecordWrittenByHandIsReadBackAsItWas() throws {
        var record = VersionRecord(
            id: "1796452045885588", item: "dir/a \"quoted\"\\name\u{1}\u{F7E9}é.txt", cause: .replaced,
            time: 1_796_452_045.885588, modified: 1_796_452_000.25, size: 42,
            replacedBy: VersionOrigin(pid: 7, uid: 1000, command: "vi\tm", host: "h"), conflict: true)
        record.pinned = true
        record.linkedInode = 123
        let read = try JSONDecoder().decode(VersionRecord.self, from: Data(VersionStore.json(record)))
        #expect(read == record)
        record.replacedBy = nil
        record.linkedInode = nil
        #expect(try JSONDecoder().decode(VersionRecord.self, from: Data(VersionStore.json(record))) == record)
    }

    @Test func versionsPastTheAgeGo() {
        let old = VersionRecord(id: "1", item: "x", cause: .replaced, time: 0, modified: 0, size: 1)
        let young = VersionRecord(id: "2", item: "x", cause: .replaced, time: 100, modified: 0, size: 1)
        var pinned = old
        pinned.pinned = true
        let limits = VersionLimits(maximumAge: 50, grace: 0)
        #expect(limits.excess(of: [old, young], now: 120) == [old])
        #expect(limits.excess(of: [pinned, young], now: 120).isEmpty)
    }

    @Test func eachItemKeepsItsOwnVersionsAndNothingIsMadeBeforeTheFirst() throws {
        try withRoot { root, fd in
            let store = try VersionStore(in: fd)
            #expect(!FileManager.default.fileExists(atPath: root + "/.coordfs-versions"))
            try write("a", root + "/one")
            try write("b", root + "/two")
            _ = try store.keep(.name("one", in: fd), item: "one", info: status(root + "/one"), cause: .deleted).get()
            _ = try store.keep(.name("two", in: fd), item: "two", info: status(root + "/two"), cause: .deleted).get()
            store.flush()
            let again = try VersionStore(in: fd)
            #expect(again.versions(of: "one").count == 1 && again.versions(of: "two").count == 1)
            #expect(try content(again, again.versions(of: "two")[0]) == "b")
        }
    }
}
