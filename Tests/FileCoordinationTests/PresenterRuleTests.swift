import Coordination
import FileCoordination
import Foundation
import TestSupport
import Testing

/// The P rules: presenters.
@Suite struct PresenterRules {
    @Test("P1 a presenter with no URL receives nothing") func p1() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = fx.presenter("P", nil)
        try fx.coordinator().coordinate(writingItemAt: a, options: .forDeleting) { _ in }
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        presenter.presentedItemURL = a
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        usleep(50_000)
        #expect(fx.log.events.isEmpty, "its URL is read again only after an access on its behalf (C22)")
        try fx.coordinator(presenter).coordinate(readingItemAt: a) { _ in }
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        #expect(fx.log.waitFor("P:relinquishToReader"))
    }

    @Test("P2 every message runs on the presenter's queue") func p2() throws {
        let fx = try Fixture()
        let a = try fx.file("dir/a")
        let file = fx.presenter("F", "dir/a")
        let dir = fx.presenter("D", "dir")
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        try fx.coordinator().coordinate(writingItemAt: a, options: .forMerging) { url in
            try Data("2".utf8).write(to: url)
        }
        try fx.coordinator().coordinate(writingItemAt: a, options: .forDeleting) { _ in }
        #expect(fx.log.waitFor("D:subitemDidChange a"))
        #expect(fx.log.waitFor("F:didChange"))
        #expect(fx.log.events.count >= 8)
        #expect(!file.ranOffQueue && !dir.ranOffQueue)
    }

    @Test("P3 a secondary presenter is messaged for its primary item") func p3() throws {
        let fx = try Fixture()
        let movie = try fx.file("movie.mkv")
        try fx.file("movie.srt")
        let subtitles = fx.presenter("S", nil)
        subtitles.presentedItemURL = fx.url("movie.srt")
        subtitles.primaryURL = movie
        fx.domain.removeFilePresenter(subtitles)
        fx.domain.addFilePresenter(subtitles)
        try fx.coordinator().coordinate(writingItemAt: movie) { _ in }
        #expect(fx.log.events == ["S:relinquishToWriter"])
    }

    @Test("P4 before another's read: relinquish to reader, reacquire after the read") func p4() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = fx.presenter("P", "a")
        presenter.givesReacquirer = true
        try fx.coordinator().coordinate(readingItemAt: a, options: .withoutChanges) { _ in fx.log.add("read") }
        #expect(fx.log.waitFor("P:reacquire"))
        #expect(fx.log.events == ["P:relinquishToReader", "read", "P:reacquire"])
    }

    @Test("P5 before another's write: relinquish to writer, reacquire after the write") func p5() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = fx.presenter("P", "a")
        presenter.givesReacquirer = true
        try fx.coordinator().coordinate(writingItemAt: a) { _ in fx.log.add("write") }
        #expect(fx.log.waitFor("P:reacquire"))
        #expect(Array(fx.log.events.prefix(3)) == ["P:relinquishToWriter", "write", "P:reacquire"])
    }

    @Test("P6 save before a read and a merging write; an error fails the access") func p6() throws {
        let fx = try Fixture()
        let a = try fx.file("a", "stale")
        let presenter = fx.presenter("P", "a")
        presenter.onSave = { try? Data("fresh".utf8).write(to: a) }
        let seen = try fx.coordinator().coordinate(readingItemAt: a) { try String(contentsOf: $0, encoding: .utf8) }
        #expect(seen == "fresh")
        presenter.saveError = PresenterRefusal(code: 1)
        var ran = false
        #expect(throws: PresenterRefusal(code: 1)) {
            try fx.coordinator().coordinate(writingItemAt: a, options: .forMerging) { _ in ran = true }
        }
        #expect(!ran && fx.isIdle)
    }

    @Test(
        "P7 before a deletion or replacement: accommodate; an error fails it",
        arguments: [FileCoordinator.WritingOptions.forDeleting, .forReplacing])
    func p7(option: FileCoordinator.WritingOptions) throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = fx.presenter("P", "a")
        try fx.coordinator().coordinate(writingItemAt: a, options: option) { _ in fx.log.add("write") }
        #expect(fx.log.order("P:accommodateDeletion", before: "write"))
        presenter.deletionError = PresenterRefusal(code: 2)
        var ran = false
        #expect(throws: PresenterRefusal(code: 2)) {
            try fx.coordinator().coordinate(writingItemAt: a, options: option) { _ in ran = true }
        }
        #expect(!ran && fx.isIdle)
    }

    @Test("P8 after a move the presenter has the new URL and is messaged under it") func p8() throws {
        let fx = try Fixture()
        let old = try fx.file("old.txt"), new = fx.url("new.txt")
        let presenter = fx.presenter("P", "old.txt")
        let mover = fx.coordinator()
        try mover.coordinate(writingItemAt: old, options: .forMoving, writingItemAt: new, options: .forReplacing) {
            s, t in
            try FileManager.default.moveItem(at: s, to: t)
            mover.item(at: s, didMoveTo: t)
        }
        #expect(fx.log.waitFor("P:didMove \(new.path)"))
        #expect(eventually { presenter.presentedItemURL == new })
        try fx.coordinator().coordinate(readingItemAt: new, options: .withoutChanges) { _ in }
        #expect(fx.log.waitFor("P:relinquishToReader"))
        try fx.file("old.txt")
        try fx.coordinator().coordinate(writingItemAt: old) { _ in }
        #expect(fx.log.count("P:relinquishToWriter") == 1, "the old path is not the presenter's any more")
    }

    @Test("P9 after another's write, the presenter hears that its item changed") func p9() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        try fx.coordinator().coordinate(writingItemAt: a) { url in try Data("new".utf8).write(to: url) }
        #expect(fx.log.waitFor("P:didChange"))
        #expect(fx.log.order("P:relinquishToWriter", before: "P:didChange"))

        // A reader queued behind the write: the presenter hears of the change before it is asked
        // to relinquish to that reader.
        let writer = Holding(fx, "W") { c, inside in
            try c.coordinate(writingItemAt: a) { url in
                inside(); try? Data("newer".utf8).write(to: url)
            }
        }
        #expect(writer.started(fx))
        let reader = fx.read("R", a)
        #expect(fx.waitForWaiters(1))
        fx.log.add("---")
        try writer.release()
        try reader.join()
        #expect(fx.log.waitFor("P:save"))
        let after = Array(fx.log.events.drop { $0 != "---" }.filter { $0.hasPrefix("P:") })
        #expect(Array(after.prefix(2)) == ["P:didChange", "P:relinquishToReader"], "\(after)")
    }

    @Test("P10 a directory presenter hears of items appearing inside it, created or moved in") func p10() throws {
        let fx = try Fixture()
        try fx.directory("dir/sub")
        let outside = try fx.file("outside.txt")
        _ = fx.presenter("D", "dir")
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir/sub/new.txt")) { url in try Data().write(to: url) }
        #expect(fx.log.waitFor("D:subitemDidAppear new.txt"))
        let mover = fx.coordinator()
        let target = fx.url("dir/moved.txt")
        try mover.coordinate(writingItemAt: outside, options: .forMoving, writingItemAt: target, options: .forReplacing)
        { s, t in
            try FileManager.default.moveItem(at: s, to: t)
            mover.item(at: s, didMoveTo: t)
        }
        #expect(fx.log.waitFor("D:subitemDidAppear moved.txt"))
    }

    @Test("P11 a directory presenter hears of a move inside it, with old and new URL") func p11() throws {
        let fx = try Fixture()
        let old = try fx.file("dir/a.txt"), new = fx.url("dir/b.txt")
        _ = fx.presenter("D", "dir")
        let mover = fx.coordinator()
        try mover.coordinate(writingItemAt: old, options: .forMoving, writingItemAt: new, options: .forReplacing) {
            s, t in
            try FileManager.default.moveItem(at: s, to: t)
            mover.item(at: s, didMoveTo: t)
        }
        #expect(fx.log.waitFor("D:subitemDidMove a.txt b.txt"))
        // A sentinel behind it on the presenter's serial queue: anything the move caused came first.
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir/sentinel")) { url in try Data().write(to: url) }
        #expect(fx.log.waitFor("D:subitemDidAppear sentinel"))
        #expect(!fx.log.contains("D:subitemDidAppear b.txt"), "a move within it is a move, not an appearance")
    }

    @Test("P12 a directory presenter hears of a change inside it") func p12() throws {
        let fx = try Fixture()
        let a = try fx.file("dir/deep/a")
        _ = fx.presenter("D", "dir")
        try fx.coordinator().coordinate(writingItemAt: a) { url in try Data("2".utf8).write(to: url) }
        #expect(fx.log.waitFor("D:subitemDidChange a"))
    }

    @Test("P13 a directory or package presenter is asked to accommodate a deletion inside it") func p13() throws {
        let fx = try Fixture()
        let a = try fx.file("dir/a")
        try fx.package("Doc.pkg")
        let b = try fx.file("Doc.pkg/b")
        let dir = fx.presenter("D", "dir")
        _ = fx.presenter("K", "Doc.pkg")
        try fx.coordinator().coordinate(writingItemAt: a, options: .forDeleting) { url in
            fx.log.add("delete")
            try FileManager.default.removeItem(at: url)
        }
        try fx.coordinator().coordinate(writingItemAt: b, options: .forDeleting) { url in
            try FileManager.default.removeItem(at: url)
        }
        #expect(fx.log.order("D:accommodateSubitemDeletion a", before: "delete"))
        #expect(fx.log.contains("K:accommodateSubitemDeletion b"))
        dir.deletionError = PresenterRefusal(code: 3)
        let c = try fx.file("dir/c")
        #expect(throws: PresenterRefusal(code: 3)) {
            try fx.coordinator().coordinate(writingItemAt: c, options: .forDeleting) { _ in }
        }
    }

    @Test("P14 all concerned presenters answer before the access; any error fails it") func p14() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenters = (0..<5).map { fx.presenter("P\($0)", "a") }
        presenters[3].onSave = { usleep(100_000) }
        try fx.coordinator().coordinate(readingItemAt: a) { _ in fx.log.add("read") }
        for index in 0..<5 { #expect(fx.log.order("P\(index):save", before: "read")) }
        presenters[2].saveError = PresenterRefusal(code: 4)
        #expect(throws: PresenterRefusal(code: 4)) {
            try fx.coordinator().coordinate(readingItemAt: a) { _ in fx.log.add("read2") }
        }
        #expect(!fx.log.contains("read2") && fx.isIdle)
    }

    @Test("P16 presenters of every enclosing package are messaged") func p16() throws {
        let fx = try Fixture()
        try fx.package("Outer.pkg")
        try fx.package("Outer.pkg/Inner.pkg")
        let leaf = try fx.file("Outer.pkg/Inner.pkg/leaf")
        _ = fx.presenter("outer", "Outer.pkg")
        _ = fx.presenter("inner", "Outer.pkg/Inner.pkg")
        try fx.coordinator().coordinate(readingItemAt: leaf, options: .withoutChanges) { _ in }
        #expect(Set(fx.log.events) == ["outer:relinquishToReader", "inner:relinquishToReader"])
    }

    @Test(
        "P17 removing a directory asks every presenter inside it",
        arguments: [
            FileCoordinator.WritingOptions.forDeleting, .forMoving, .forReplacing
        ])
    func p17(option: FileCoordinator.WritingOptions) throws {
        let fx = try Fixture()
        try fx.file("dir/x/y/deep")
        _ = fx.presenter("deep", "dir/x/y/deep")
        _ = fx.presenter("x", "dir/x")
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir"), options: option) { _ in }
        #expect(fx.log.contains("deep:relinquishToWriter") && fx.log.contains("x:relinquishToWriter"))
        let accommodates = fx.log.contains("deep:accommodateDeletion") && fx.log.contains("x:accommodateDeletion")
        #expect(accommodates == (option != .forMoving))
    }

    @Test("P19 did-change goes to file presenters, subitem news to directory presenters at any depth") func p19() throws
    {
        let fx = try Fixture()
        let file = try fx.file("top/mid/f")
        let dir = try fx.directory("top/mid/d")
        _ = fx.presenter("top", "top")
        _ = fx.presenter("f", "top/mid/f")
        _ = fx.presenter("d", "top/mid/d")
        try fx.coordinator().coordinate(writingItemAt: file) { url in try Data("1".utf8).write(to: url) }
        try fx.coordinator().coordinate(writingItemAt: dir, options: .contentIndependentMetadataOnly) { url in
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: url.path)
        }
        #expect(fx.log.waitFor("f:didChange"))
        #expect(fx.log.waitFor("top:subitemDidChange f"))
        #expect(fx.log.waitFor("top:subitemDidChange d"))
        usleep(50_000)
        #expect(!fx.log.contains("d:didChange"), "a plain directory gets no did-change")
        #expect(!fx.log.contains("top:didChange"))
    }

    @Test("P20 a package presenter lacking subitem notifications gets did-change") func p20() throws {
        let fx = try Fixture()
        try fx.package("Doc.pkg")
        let page = try fx.file("Doc.pkg/page")
        let presenter = ChangeOnlyPresenter(name: "K", url: fx.url("Doc.pkg"), log: fx.log)
        fx.domain.addFilePresenter(presenter)
        try fx.coordinator().coordinate(writingItemAt: page) { url in try Data("2".utf8).write(to: url) }
        #expect(fx.log.waitFor("K:didChange"))
        try fx.coordinator().coordinate(writingItemAt: fx.url("Doc.pkg/new")) { url in try Data().write(to: url) }
        #expect(eventually { fx.log.count("K:didChange") == 2 })
    }

    @Test("P21 save and accommodate may come without relinquish; news may come without any request") func p21() throws {
        let fx = try Fixture()
        let a = try fx.file("dir/a")
        _ = fx.presenter("P", "dir/a")
        let coordinator = fx.coordinator()
        try coordinator.prepare(forReadingItemsAt: [], writingItemsAt: [fx.url("dir")]) { completion in
            fx.log.add("batch")
            try? coordinator.coordinate(readingItemAt: a) { _ in }
            try? coordinator.coordinate(writingItemAt: a, options: .forDeleting) { _ in }
            completion()
        }
        let afterBatch = fx.log.events.drop { $0 != "batch" }
        #expect(afterBatch.contains("P:save") && afterBatch.contains("P:accommodateDeletion"))
        #expect(!afterBatch.contains { $0.hasPrefix("P:relinquish") })
        fx.log.add("meta")
        try fx.coordinator().coordinate(writingItemAt: a, options: .contentIndependentMetadataOnly) { url in
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        }
        #expect(fx.log.waitFor("P:didChange"))
        #expect(fx.log.events.drop { $0 != "meta" }.dropFirst() == ["P:didChange"])
    }

    @Test("P22 deleting inside a package is a write to the package for its presenters") func p22() throws {
        let fx = try Fixture()
        try fx.package("Doc.pkg")
        let page = try fx.file("Doc.pkg/page")
        _ = fx.presenter("K", "Doc.pkg")
        try fx.coordinator().coordinate(writingItemAt: page, options: .forDeleting) { url in
            try FileManager.default.removeItem(at: url)
        }
        #expect(fx.log.contains("K:relinquishToWriter"))
        #expect(fx.log.contains("K:accommodateSubitemDeletion page"))
        #expect(!fx.log.contains("K:accommodateDeletion"))
    }
}
