import Coordination
import FileCoordination
import Foundation
import TestSupport
import Testing

/// The O rules: reading and writing options.
@Suite struct OptionRules {
    @Test("O1 a read withoutChanges does not ask presenters to save") func o1() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        try fx.coordinator().coordinate(readingItemAt: a, options: .withoutChanges) { _ in }
        #expect(fx.log.events == ["P:relinquishToReader"])
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        #expect(fx.log.events == ["P:relinquishToReader", "P:relinquishToReader", "P:save"])
    }

    @Test("O2 resolvesSymbolicLink coordinates the link's target and hands over its URL") func o2() throws {
        let fx = try Fixture()
        let target = try fx.file("target.txt")
        let link = fx.url("link.txt")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let url = try fx.coordinator().coordinate(readingItemAt: link, options: .resolvesSymbolicLink) { $0 }
        #expect(url.path == target.path)
        // Without the option the link itself is the item, and a writer of the target does not stop it.
        let writer = fx.holdWrite("W", target)
        #expect(writer.started(fx))
        try fx.read("plain", link).join()
        let resolved = fx.read("resolved", link, .resolvesSymbolicLink)
        #expect(fx.waitForWaiters(1))
        try writer.release()
        try resolved.join()
        #expect(fx.log.order("W-end", before: "resolved-run"))
    }

    @Test("O3 immediatelyAvailableMetadataOnly asks nobody and waits only for destructive writes") func o3() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        let writer = fx.holdWrite("W", a)
        #expect(writer.started(fx))
        fx.log.add("---")
        try fx.read("meta", a, .immediatelyAvailableMetadataOnly).join()  // not stopped by a plain write
        try writer.release()
        let deleter = fx.holdWrite("D", a, .forDeleting)
        #expect(deleter.started(fx))
        let meta = fx.read("meta2", a, .immediatelyAvailableMetadataOnly)
        #expect(fx.waitForWaiters(1))
        try deleter.release()
        try meta.join()
        #expect(fx.log.order("D-end", before: "meta2-run"))
        let afterMarker = fx.log.events.drop(while: { $0 != "---" })
        #expect(
            afterMarker.filter { $0.hasPrefix("P:") && !$0.contains("Deletion") && !$0.contains("relinquishToWriter") }
                .isEmpty,
            "the metadata reads asked the presenter nothing: \(fx.log.events)")
    }

    @Test("O4 forUploading hands over a read-only snapshot and releases the item at once") func o4() throws {
        let fx = try Fixture()
        let file = try fx.file("doc.txt", "hello")
        let writerDone = Gate()
        let snapshotPath = try fx.coordinator().coordinate(readingItemAt: file, options: .forUploading) {
            snapshot -> String in
            #expect(snapshot.path != file.path)
            #expect(try String(contentsOf: snapshot, encoding: .utf8) == "hello")
            let mode = try FileManager.default.attributesOfItem(atPath: snapshot.path)[.posixPermissions] as? Int
            #expect(mode.map { $0 & 0o222 } == 0, "read-only")
            // The original is free: a writer goes through while the upload runs.
            let writer = fx.write("W", file)
            try writer.join(timeout: .seconds(5))
            writerDone.open()
            return snapshot.path
        }
        writerDone.wait()
        #expect(!FileManager.default.fileExists(atPath: snapshotPath), "removed when the accessor returned")

        // A directory becomes one archive, which tar reads back.
        try fx.file("pkg/a.txt", "A")
        try fx.file("pkg/sub/b.txt", "B")
        let listing = try fx.coordinator().coordinate(readingItemAt: fx.url("pkg"), options: .forUploading) {
            archive -> String in
            #expect(archive.pathExtension == "tar")
            let tar = Process()
            tar.executableURL = URL(fileURLWithPath: "/bin/tar")
            tar.arguments = ["-tf", archive.path]
            let pipe = Pipe()
            tar.standardOutput = pipe
            try tar.run()
            tar.waitUntilExit()
            return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        #expect(listing.contains("pkg/a.txt") && listing.contains("pkg/sub/b.txt"))

        // On a queue and with async/await too: the intent's URL is the snapshot, gone afterwards.
        let intent = FileAccessIntent.readingIntent(with: file, options: .forUploading)
        let done = Gate()
        let seen = EventLog()
        fx.coordinator().coordinate(with: [intent], queue: OperationQueue()) { error in
            seen.add(
                error == nil && intent.url != file
                    ? (try? String(contentsOf: intent.url, encoding: .utf8)) ?? "unreadable" : "no snapshot")
            done.open()
        }
        done.wait()
        #expect(seen.events == ["hello"])
        #expect(
            eventually { !FileManager.default.fileExists(atPath: intent.url.path) },
            "removed once the accessor returned")
    }

    @Test("O5 forDeleting asks the item's presenters, and those inside it, to accommodate the deletion") func o5()
        throws
    {
        let fx = try Fixture()
        try fx.file("dir/a")
        _ = fx.presenter("dir", "dir")
        _ = fx.presenter("inner", "dir/a")
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir"), options: .forDeleting) { url in
            #expect(fx.log.contains("dir:accommodateDeletion") && fx.log.contains("inner:accommodateDeletion"))
            try FileManager.default.removeItem(at: url)
        }
        #expect(fx.log.order("dir:relinquishToWriter", before: "dir:accommodateDeletion"))
    }

    @Test("O6 forMoving asks the item's presenters, and those inside it, to relinquish to the writer") func o6() throws
    {
        let fx = try Fixture()
        try fx.file("dir/a")
        _ = fx.presenter("dir", "dir")
        _ = fx.presenter("inner", "dir/a")
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir"), options: .forMoving) { _ in }
        #expect(Set(fx.log.events) == ["dir:relinquishToWriter", "inner:relinquishToWriter"])
    }

    @Test("O7 forMerging asks presenters to save first") func o7() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        try fx.coordinator().coordinate(writingItemAt: a, options: .forMerging) { _ in fx.log.add("merge") }
        #expect(fx.log.order("P:save", before: "merge"))
        try fx.coordinator().coordinate(writingItemAt: a) { _ in }
        #expect(fx.log.count("P:save") == 1, "a plain write does not ask to save")
    }

    @Test("O8 forReplacing asks to accommodate deletion and stays bound to the path") func o8() throws {
        let fx = try Fixture()
        let old = try fx.file("old"), moved = try fx.file("moved")
        _ = fx.presenter("P", "moved")  // the item the move replaces
        let mover = fx.coordinator()
        let gate = Gate()
        let moving = Background {
            try mover.coordinate(writingItemAt: old, options: .forMoving, writingItemAt: moved, options: .forReplacing)
            { s, t in
                gate.wait()
                #expect(rename(s.path, t.path) == 0)  // replaces, atomically
                mover.item(at: s, didMoveTo: t)
            }
        }
        #expect(eventually { fx.engine.snapshot().holders.count == 1 })
        let replace = FileAccessIntent.writingIntent(with: old, options: .forReplacing)
        let follow = FileAccessIntent.writingIntent(with: fx.url("old"))
        let done = Gate(), done2 = Gate()
        fx.coordinator().coordinate(with: [replace], queue: OperationQueue()) { _ in done.open() }
        fx.coordinator().coordinate(with: [follow], queue: OperationQueue()) { _ in done2.open() }
        #expect(fx.waitForWaiters(2))
        gate.open()
        try moving.join()
        done.wait(); done2.wait()
        #expect(replace.url.path == old.path, "forReplacing means the path")
        #expect(follow.url.path == moved.path, "an ordinary write follows the item")
        #expect(fx.log.contains("P:accommodateDeletion"))
    }

    @Test("O9 contentIndependentMetadataOnly asks nobody, waits for writes but not for reads") func o9() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        let reader = fx.holdRead("R", a, .withoutChanges)
        #expect(reader.started(fx))
        fx.log.add("---")
        try fx.write("meta", a, .contentIndependentMetadataOnly).join()
        #expect(fx.log.contains("meta-run") && !fx.log.contains("R-end"), "the metadata write ran while R still held")
        try reader.release()
        let writer = fx.holdWrite("W", a)
        #expect(writer.started(fx))
        let meta = fx.write("meta2", a, .contentIndependentMetadataOnly)
        #expect(fx.waitForWaiters(1))
        try writer.release()
        try meta.join()
        #expect(fx.log.order("W-end", before: "meta2-run"))
        let requestsAfterMarker = fx.log.events.drop(while: { $0 != "---" }).filter {
            $0.hasPrefix("P:") && $0 != "P:didChange" && $0 != "P:relinquishToWriter"
        }
        #expect(requestsAfterMarker.isEmpty, "\(fx.log.events)")
        #expect(fx.log.count("P:relinquishToWriter") == 1, "only the plain write asked")
    }

    @Test("O10 option raw values are Apple's and a write carries at most one option") func o10() throws {
        #expect(FileCoordinator.ReadingOptions.withoutChanges.rawValue == 1)
        #expect(FileCoordinator.ReadingOptions.resolvesSymbolicLink.rawValue == 2)
        #expect(FileCoordinator.ReadingOptions.immediatelyAvailableMetadataOnly.rawValue == 4)
        #expect(FileCoordinator.ReadingOptions.forUploading.rawValue == 8)
        #expect(FileCoordinator.WritingOptions.forDeleting.rawValue == 1)
        #expect(FileCoordinator.WritingOptions.forMoving.rawValue == 2)
        #expect(FileCoordinator.WritingOptions.forMerging.rawValue == 4)
        #expect(FileCoordinator.WritingOptions.forReplacing.rawValue == 8)
        #expect(FileCoordinator.WritingOptions.contentIndependentMetadataOnly.rawValue == 16)
        let fx = try Fixture()
        let a = try fx.file("a")
        var ran = false
        #expect(throws: FileCoordinationError.self) {
            try fx.coordinator().coordinate(writingItemAt: a, options: [.forDeleting, .forMerging]) { _ in ran = true }
        }
        #expect(!ran && fx.isIdle)
    }

    @Test("O11 forMoving changes nothing for a file and covers a directory's contents") func o11() throws {
        let fx = try Fixture()
        let file = try fx.file("f")
        let dir = try fx.directory("d")
        let inner = try fx.file("d/x")
        // A file: same waiting as a plain write; readers of other items unaffected.
        let mover = fx.holdWrite("M", file, .forMoving)
        #expect(mover.started(fx))
        try fx.read("other", inner).join()
        let reader = fx.read("R", file)
        #expect(fx.waitForWaiters(1))
        try mover.release()
        try reader.join()
        // A directory: waits for running access inside, holds back access queued behind it.
        let running = fx.holdWrite("I", inner)
        #expect(running.started(fx))
        let dirMove = fx.write("DM", dir, .forMoving)
        #expect(fx.waitForWaiters(1))
        let queued = fx.read("Q", inner)
        #expect(fx.waitForWaiters(2))
        try running.release()
        try dirMove.join()
        try queued.join()
        #expect(fx.log.order("I-end", before: "DM-run"))
        #expect(fx.log.order("DM-run", before: "Q-run"))
    }
}
