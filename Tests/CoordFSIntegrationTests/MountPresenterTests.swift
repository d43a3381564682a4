import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Presenters registered in the mount's process hear of other processes' accesses.
@Suite struct MountPresenters {
    @Test func aReadByAnotherProcessAsksToRelinquishAndSaveThenReacquires() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("doc.txt", "v1\n")
        let log = EventLog()
        let presenter = LoggingPresenter("P", fx.path("doc.txt"), log: log)
        fx.domain!.addFilePresenter(presenter)
        let result = try run("/bin/cat", [fx.path("doc.txt")])
        #expect(result.output == "v1\n")
        #expect(log.waitFor("P:reacquire"))
        #expect(log.order("P:relinquishToReader", before: "P:save"))
        #expect(log.order("P:save", before: "P:reacquire"))
    }

    @Test func writesAndCreationsAreReportedAfterTheClose() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("dir/doc.txt", "v1\n")
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("F", fx.path("dir/doc.txt"), log: log))
        fx.domain!.addFilePresenter(LoggingPresenter("D", fx.path("dir"), log: log))
        _ = try run("/bin/sh", ["-c", "echo v2 >> \(fx.path("dir/doc.txt")); echo new > \(fx.path("dir/new.txt"))"])
        #expect(log.waitFor("F:didChange"))
        #expect(log.waitFor("D:subitemDidChange doc.txt"))
        #expect(log.waitFor("D:subitemDidAppear new.txt"))
        #expect(log.order("F:relinquishToWriter", before: "F:didChange"))
    }

    @Test func unlinkAsksToAccommodateAndAPresentersRefusalFailsIt() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("dir/doc.txt")
        try fx.seed("dir/keep.txt")
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("F", fx.path("dir/doc.txt"), log: log))
        fx.domain!.addFilePresenter(LoggingPresenter("D", fx.path("dir"), log: log))
        let keeper = LoggingPresenter("K", fx.path("dir/keep.txt"), log: log)
        keeper.deletionError = POSIXError(.EACCES)
        fx.domain!.addFilePresenter(keeper)
        let removed = try run("/bin/rm", [fx.path("dir/doc.txt")])
        #expect(removed.status == 0)
        #expect(log.events.contains("F:accommodateDeletion"))
        #expect(log.events.contains("D:accommodateSubitemDeletion doc.txt"))
        let refused = try run("/bin/rm", [fx.path("dir/keep.txt")])
        #expect(refused.status != 0 && refused.errors.contains("Permission denied"))
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("dir/keep.txt")), "nothing was lost")
    }

    @Test func aRenameMovesThePresenterAndTellsTheDirectory() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("dir/old.txt")
        let log = EventLog()
        let presenter = LoggingPresenter("F", fx.path("dir/old.txt"), log: log)
        fx.domain!.addFilePresenter(presenter)
        fx.domain!.addFilePresenter(LoggingPresenter("D", fx.path("dir"), log: log))
        #expect(try run("/bin/mv", [fx.path("dir/old.txt"), fx.path("dir/new.txt")]).status == 0)
        #expect(log.waitFor("F:didMove \(fx.path("dir/new.txt"))"))
        #expect(log.waitFor("D:subitemDidMove old.txt new.txt"))
        #expect(log.order("F:relinquishToWriter", before: "F:didMove \(fx.path("dir/new.txt"))"))
        #expect(eventually { presenter.presentedItemURL?.path == fx.path("dir/new.txt") })
        // And it is asked under its new name.
        _ = try run("/bin/cat", [fx.path("dir/new.txt")])
        #expect(log.waitFor("F:relinquishToReader"))
    }

    /// A directory made a package through its marker file, in the backing directory.
    func package(_ fx: MountFixture, _ relative: String) throws {
        try fx.seed(relative + "/.coordfs-package", "")
    }

    @Test("P16 presenters of every enclosing package are messaged, through the mount") func p16() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try package(fx, "Outer.pkg")
        try package(fx, "Outer.pkg/Inner.pkg")
        try fx.seed("Outer.pkg/Inner.pkg/leaf", "leaf\n")
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("outer", fx.path("Outer.pkg"), log: log))
        fx.domain!.addFilePresenter(LoggingPresenter("inner", fx.path("Outer.pkg/Inner.pkg"), log: log))
        #expect(try run("/bin/cat", [fx.path("Outer.pkg/Inner.pkg/leaf")]).output == "leaf\n")
        #expect(log.waitFor("outer:reacquire") && log.waitFor("inner:reacquire"))
        #expect(log.events.contains("outer:relinquishToReader") && log.events.contains("inner:relinquishToReader"))
    }

    @Test("P20 a package presenter lacking subitem notifications gets did-change, through the mount") func p20() throws
    {
        let fx = try MountFixture(inProcess: { _ in })
        try package(fx, "Doc.pkg")
        try fx.seed("Doc.pkg/page", "1\n")
        let log = EventLog()
        fx.domain!.addFilePresenter(
            ChangeOnlyPresenter(name: "K", url: URL(fileURLWithPath: fx.path("Doc.pkg")), log: log))
        #expect(try run("/bin/sh", ["-c", "echo 2 >> \(fx.path("Doc.pkg/page"))"]).status == 0)
        #expect(log.waitFor("K:didChange"))
        #expect(try run("/bin/sh", ["-c", "echo new > \(fx.path("Doc.pkg/new"))"]).status == 0)
        #expect(eventually { log.count("K:didChange") == 2 }, "\(log.events)")
    }

    @Test("P22 deleting inside a package is a write to the package, through the mount") func p22() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try package(fx, "Doc.pkg")
        try fx.seed("Doc.pkg/page")
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("K", fx.path("Doc.pkg"), log: log))
        #expect(try run("/bin/rm", [fx.path("Doc.pkg/page")]).status == 0)
        #expect(log.waitFor("K:accommodateSubitemDeletion page"))
        #expect(log.events.contains("K:relinquishToWriter"))
        #expect(!log.events.contains("K:accommodateDeletion"))
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("Doc.pkg/page")))
    }

    @Test func notifyModeTellsButNobodyWaits() throws {
        let fx = try MountFixture(inProcess: { $0.mode = .notify })
        try fx.seed("a.txt")
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("F", fx.path("a.txt"), log: log))
        let holder = try Child.holder(), other = try Child.holder()
        #expect(holder.ask("open w \(fx.path("a.txt"))") == "ok 1")
        #expect(other.ask("open wn \(fx.path("a.txt"))") == "ok 1")
        #expect(holder.ask("write 1 more") == "ok")
        #expect(holder.ask("close 1") == "ok")
        #expect(log.waitFor("F:didChange"))
        #expect(!log.events.contains { $0.contains("relinquish") }, "nobody is asked, only told")
    }
}

/// The mount remembers each directory's path and packages between requests
/// (`DirectoryContexts`); what changes them through the mount must be seen at the next request.
/// One serving thread: what it remembered is what the next request finds.
@Suite struct RememberedDirectories {
    @Test func aDirectoryRenamedThroughTheMountIsCoordinatedUnderItsNewPath() throws {
        let fx = try MountFixture(inProcess: { $0.maxThreads = 1 })
        try fx.seed("dir/a/doc.txt", "v1\n")
        for _ in 0..<3 { #expect(try run("/bin/cat", [fx.path("dir/a/doc.txt")]).output == "v1\n") }
        #expect(try run("/bin/mv", [fx.path("dir/a"), fx.path("dir/b")]).status == 0)
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("F", fx.path("dir/b/doc.txt"), log: log))
        #expect(try run("/bin/cat", [fx.path("dir/b/doc.txt")]).output == "v1\n")
        #expect(log.waitFor("F:relinquishToReader"), "\(log.events)")
    }

    @Test func aDirectoryRenamedBehindTheMountIsCoordinatedUnderTheNameLookedUp() throws {
        // Long caches: only the lookup of the new name can tell the mount.
        let fx = try MountFixture(inProcess: {
            $0.maxThreads = 1; $0.cacheTimeout = 60
        })
        try fx.seed("dir/a/doc.txt", "v1\n")
        for _ in 0..<3 { #expect(try run("/bin/cat", [fx.path("dir/a/doc.txt")]).output == "v1\n") }
        #expect(rename(fx.backingPath("dir/a"), fx.backingPath("dir/b")) == 0)
        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("F", fx.path("dir/b/doc.txt"), log: log))
        #expect(try run("/bin/cat", [fx.path("dir/b/doc.txt")]).output == "v1\n")
        #expect(log.waitFor("F:relinquishToReader"), "\(log.events)")
    }

    @Test func aPackageMarkerMadeThroughTheMountCountsAtOnce() throws {
        let fx = try MountFixture(inProcess: { $0.maxThreads = 1 })
        try fx.seed("Doc/page", "1\n")
        for _ in 0..<3 { #expect(try run("/bin/sh", ["-c", "echo x >> \(fx.path("Doc/page"))"]).status == 0) }
        let log = EventLog()
        fx.domain!.addFilePresenter(ChangeOnlyPresenter(name: "K", url: URL(fileURLWithPath: fx.path("Doc")), log: log))
        #expect(try run("/bin/touch", [fx.path("Doc/.coordfs-package")]).status == 0)
        #expect(try run("/bin/sh", ["-c", "echo 2 >> \(fx.path("Doc/page"))"]).status == 0)
        // A package presenter without subitem callbacks hears of changes inside it (P20).
        #expect(log.waitFor("K:didChange"), "\(log.events)")
    }
}
