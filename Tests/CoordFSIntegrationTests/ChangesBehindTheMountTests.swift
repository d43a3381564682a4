import CLinux
@testable import CoordFSMount
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A presenter that notes each message with the route of the access it is about.
private final class OriginPresenter: ExtendedFilePresenter, @unchecked Sendable {
    let name: String
    let log: EventLog
    private let lock = NSLock()
    private var url: URL?
    let presentedItemOperationQueue = OperationQueue()

    init(_ name: String, _ path: String, log: EventLog) {
        self.name = name
        self.log = log
        url = URL(fileURLWithPath: path)
    }

    var presentedItemURL: URL? {
        get { lock.lock(); defer { lock.unlock() }; return url }
        set { lock.lock(); url = newValue; lock.unlock() }
    }

    private func note(_ message: String) {
        log.add(
            "\(name):\(message) via \(AccessOrigin.current.map { $0.via.rawValue } ?? "?")"
                + (AccessOrigin.current?.pid == nil ? "" : " with pid"))
    }

    func relinquishPresentedItem(
        toWriter: Bool, completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
    ) {
        completion(nil, nil)
    }
    func presentedSubitemWasDeleted(at url: URL) { note("subitemWasDeleted \(url.lastPathComponent)") }
    func presentedItemWasDeleted() { note("wasDeleted") }
    func presentedItemDidChange() { note("didChange") }
    func presentedItemDidMove(to newURL: URL) { note("didMove \(newURL.lastPathComponent)"); presentedItemURL = newURL }
    func presentedSubitemDidAppear(at url: URL) { note("subitemDidAppear \(url.lastPathComponent)") }
    func presentedSubitemDidChange(at url: URL) { note("subitemDidChange \(url.lastPathComponent)") }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        note("subitemDidMove \(oldURL.lastPathComponent) \(newURL.lastPathComponent)")
    }
}

/// Changes made to the backing directory behind the mount (another program writing it
/// directly): presenters hear of them as changes from outside, and programs reading through the
/// mount see them at once, though the kernel keeps names and attributes for a day.
@Suite(.serialized) struct ChangesBehindTheMount {
    /// Runs a shell command as another process: a program that does not go through the mount.
    @discardableResult
    func behind(_ command: String) throws -> String {
        let result = try run("/bin/sh", ["-c", command])
        #expect(result.status == 0, "\(command): \(result.errors)")
        return result.output
    }

    /// How the watch marks what it watches: BACKING's filesystem (as root), or each directory
    /// below BACKING (as a mount without root does).
    static let scopes = [false, true]

    @Test(arguments: scopes)
    func presentersHearEachKindOfChangeAsComingFromOutside(byDirectory: Bool) throws {
        let fx = try MountFixture(inProcess: { $0.watchesBackingByDirectory = byDirectory })
        try fx.seed("dir/doc.txt", "v1\n")
        let log = EventLog()
        let file = OriginPresenter("F", fx.path("dir/doc.txt"), log: log)
        fx.domain!.addFilePresenter(file)
        fx.domain!.addFilePresenter(OriginPresenter("D", fx.path("dir"), log: log))
        let dir = fx.backingPath("dir")

        try behind("echo v2 > '\(dir)/doc.txt'")  // a write
        #expect(log.waitFor("F:didChange via outside"))
        #expect(log.waitFor("D:subitemDidChange doc.txt via outside"))
        try behind("echo v3 >> '\(dir)/doc.txt'")  // an append
        #expect(eventually { log.count("F:didChange via outside") >= 2 })
        try behind("truncate -s 1 '\(dir)/doc.txt'")  // a truncation
        #expect(eventually { log.count("F:didChange via outside") >= 3 })
        try behind("echo new > '\(dir)/new.txt'")  // a create
        #expect(log.waitFor("D:subitemDidAppear new.txt via outside"))
        try behind("mkdir '\(dir)/sub'")  // a mkdir
        #expect(log.waitFor("D:subitemDidAppear sub via outside"))
        try behind("mv '\(dir)/doc.txt' '\(dir)/moved.txt'")  // a rename
        #expect(log.waitFor("F:didMove moved.txt via outside"))
        #expect(log.waitFor("D:subitemDidMove doc.txt moved.txt via outside"))
        #expect(eventually { file.presentedItemURL?.path == fx.path("dir/moved.txt") })
        try behind("rm '\(dir)/new.txt'")  // an unlink
        #expect(log.waitFor("D:subitemWasDeleted new.txt via outside"))
        #expect(log.matching("").allSatisfy { !$0.contains("with pid") }, "nobody coordinated them: \(log.events)")
    }

    /// A save by rename (a temporary file moved over the document), a file moved in from
    /// elsewhere on the same filesystem, and a change of the directory itself, which the kernel
    /// keeps for a day.
    @Test(arguments: scopes)
    func savesByRenameMovesInAndTheDirectoryItself(byDirectory: Bool) throws {
        let fx = try MountFixture(inProcess: { $0.watchesBackingByDirectory = byDirectory })
        try fx.seed("dir/doc.txt", "v1\n")
        let elsewhere = fx.base.appendingPathComponent("elsewhere.txt").path
        try "from elsewhere\n".write(toFile: elsewhere, atomically: false, encoding: .utf8)
        let log = EventLog()
        fx.domain!.addFilePresenter(OriginPresenter("F", fx.path("dir/doc.txt"), log: log))
        fx.domain!.addFilePresenter(OriginPresenter("D", fx.path("dir"), log: log))
        let dir = fx.backingPath("dir")
        #expect(try behind("ls '\(fx.path("dir"))'") == "doc.txt\n")

        try behind("echo v2 > '\(dir)/.doc.tmp' && mv '\(dir)/.doc.tmp' '\(dir)/doc.txt'")
        #expect(log.waitFor("F:didChange via outside"), "the document replaced: \(log.events)")
        #expect(try behind("cat '\(fx.path("dir/doc.txt"))'") == "v2\n")
        try behind("mv '\(elsewhere)' '\(dir)/moved-in.txt'")
        #expect(log.waitFor("D:subitemDidAppear moved-in.txt via outside"))
        #expect(try behind("ls '\(fx.path("dir"))'") == "doc.txt\nmoved-in.txt\n")
        // The directory's own attributes (reported as its entry "."): forgotten by the kernel.
        #expect(try behind("stat -c %a '\(fx.path("dir"))'") == "755\n")
        try behind("chmod 700 '\(dir)'")
        // As soon as the watch has told the kernel (a program started at once may come first).
        var mode = ""
        #expect(
            eventually(.seconds(2)) {
                mode = (try? run("/usr/bin/stat", ["-c", "%a", fx.path("dir")]).output) ?? ""
                return mode == "700\n"
            }, "a stale mode: \(mode)")
    }

    /// With the kernel keeping names and attributes for a day, a program reading through the
    /// mount still sees each change made behind it as soon as the backing watch has told the
    /// kernel (milliseconds; on a busy machine a program started at once may come first, so
    /// each is looked at again for up to two seconds); through kernel passthrough and through
    /// the page cache (its pages are forgotten too).
    @Test(arguments: [[String](), ["--no-kernel-passthrough"], ["--backing-watch-by-directory"]])
    func programsReadingThroughTheMountSeeEachChangeAtOnce(_ options: [String]) throws {
        let fx = try MountFixture(options)
        try fx.seed("dir/doc.txt", "aaaa\n")
        let dir = fx.backingPath("dir"), mounted = fx.path("dir")
        /// What a command shows, or its error when it fails: looked at again until it shows
        /// what is expected, a failure on the way (a stale absence) is not the test's.
        func shows(_ command: String) -> String {
            guard let result = try? run("/bin/sh", ["-c", command]) else { return "(not run)" }
            return result.status == 0 ? result.output : "(failed: \(result.errors))"
        }
        func size(_ path: String) -> String {
            shows("stat -c %s '\(path)'").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        /// Whether `look` shows `expected` within the watch's latency; what it showed last.
        func seen(_ expected: String, _ look: () -> String) -> (Bool, String) {
            var last = ""
            let shown = eventually(.seconds(2)) {
                last = look()
                return last == expected
            }
            return (shown, last)
        }
        // What the kernel keeps: an attribute, a page, a name and an absence.
        #expect(size("\(mounted)/doc.txt") == "5")
        #expect(try behind("cat '\(mounted)/doc.txt'") == "aaaa\n")
        #expect(try behind("ls '\(mounted)'") == "doc.txt\n")
        #expect(try run("/usr/bin/stat", ["\(mounted)/later.txt"]).status != 0)

        try behind("echo bbbb > '\(dir)/doc.txt'")
        var (shown, last) = seen("bbbb\n") { shows("cat '\(mounted)/doc.txt'") }
        #expect(shown, "stale data: \(last)")
        try behind("echo cc >> '\(dir)/doc.txt'")
        (shown, last) = seen("8") { size("\(mounted)/doc.txt") }
        #expect(shown, "stale size: \(last)")
        (shown, last) = seen("bbbb\ncc\n") { shows("cat '\(mounted)/doc.txt'") }
        #expect(shown, "stale data: \(last)")
        try behind("truncate -s 2 '\(dir)/doc.txt'")
        (shown, last) = seen("2") { size("\(mounted)/doc.txt") }
        #expect(shown, "stale size: \(last)")
        try behind("echo later > '\(dir)/later.txt'")
        (shown, last) = seen("6") { size("\(mounted)/later.txt") }
        #expect(shown, "a stale absence: \(last)")
        try behind("mv '\(dir)/later.txt' '\(dir)/renamed.txt'")
        (shown, last) = seen("doc.txt\nrenamed.txt\n") { shows("ls '\(mounted)'") }
        #expect(shown, "stale names: \(last)")
        #expect(
            eventually(.seconds(2)) { (try? run("/usr/bin/stat", ["\(mounted)/later.txt"]).status) != 0 },
            "the old name still shows")
        try behind("mkdir '\(dir)/sub' && rm '\(dir)/renamed.txt'")
        (shown, last) = seen("doc.txt\nsub\n") { shows("ls '\(mounted)'") }
        #expect(shown, "stale names: \(last)")
        try behind("chmod 600 '\(dir)/doc.txt'")
        (shown, last) = seen("600\n") { shows("stat -c %a '\(mounted)/doc.txt'") }
        #expect(shown, "a stale mode: \(last)")
    }

    /// Changes behind the mount that were lost (the watch's queue overflowed, or its marks ran
    /// out): the kernel forgets every name it keeps, those it keeps as missing too, so a file
    /// made meanwhile shows where a lookup had found nothing. (Needs Linux 6.16; before it, a
    /// missing name is kept until its time runs out.)
    @Test func namesKeptAsMissingAreForgottenOnceChangesWereLost() throws {
        // No watch and a day's cache time: only the mount's own notice can make the kernel forget.
        let fx = try MountFixture(inProcess: {
            $0.watchesBacking = false
            $0.cacheTimeout = 86_400
        })
        try fx.seed("dir/doc.txt", "v1\n")
        // At the top: a name kept as missing in a directory below goes with its directory's
        // name, which the mount forgets as any known node's; the root has no name to forget.
        let missing = fx.path("late.txt")
        #expect(try run("/usr/bin/stat", [missing]).status != 0)
        try behind("echo late > '\(fx.backingPath("late.txt"))'")
        #expect(try run("/usr/bin/stat", [missing]).status != 0, "the kernel did not keep the missing name")
        fx.filesystem!.invalidateEverything()
        #expect(try behind("cat '\(missing)'") == "late\n", "still kept as missing")
        #expect(try behind("cat '\(fx.path("dir/doc.txt"))'") == "v1\n")
        #expect(try fx.statistics()["all_names_forgotten"] == 1)
    }

    /// The mount's own changes reach the backing directory too, and are told once, as the
    /// mount's: none comes back as a change from outside.
    @Test(arguments: scopes)
    func theMountsOwnChangesAreNotToldAgainAsFromOutside(byDirectory: Bool) throws {
        let fx = try MountFixture(byDirectory ? ["--backing-watch-by-directory"] : [])
        let mounted = fx.path("")
        try behind(
            """
            cd '\(mounted)' && mkdir d && echo one > d/f && echo two >> d/f && truncate -s 1 d/f && chmod 600 d/f \
            && mv d/f d/g && ln -s g d/link && rm d/link && python3 -c "
            import os
            fd = os.open('d/g', os.O_RDWR)
            for i in range(100): os.write(fd, b'x')
            os.close(fd)" && rm d/g && rmdir d
            """)
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try fx.statistics()["changes_behind"] == 0)
        // The watch is there: a change from outside is counted.
        try behind("echo outside > '\(fx.backingPath("outside.txt"))'")
        #expect(eventually { ((try? fx.statistics()["changes_behind"]) ?? 0) >= 1 })
    }

    /// Two programs save one name through the mount by renaming over it, the first closing its
    /// file only after the second's save replaced it: that close, reported under the name the
    /// file had, is the mount's own write of a file no longer there, not a change from outside
    /// of what the name leads to now (P9: each save is told once, as the mount's).
    @Test(
        "P9 a close read after another save replaced the file's name is not told as from outside",
        arguments: scopes)
    func aCloseAfterTheNameWasSavedOverIsNotToldAsFromOutside(byDirectory: Bool) throws {
        let fx = try MountFixture(byDirectory ? ["--backing-watch-by-directory"] : [])
        try behind(
            """
            cd '\(fx.path(""))' && python3 -c "
            import os, subprocess
            for i in range(5):
                fd = os.open('doc.tmp', os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, b'first')
                os.rename('doc.tmp', 'doc')
                subprocess.run(['sh', '-c', 'echo second > other.tmp && mv other.tmp doc'], check=True)
                os.close(fd)"
            """)
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try fx.statistics()["changes_behind"] == 0)
        #expect(try String(contentsOfFile: fx.backingPath("doc"), encoding: .utf8) == "second\n")
        // The watch is there: a change from outside is counted.
        try behind("echo outside >> '\(fx.backingPath("doc"))'")
        #expect(eventually { ((try? fx.statistics()["changes_behind"]) ?? 0) >= 1 })
    }

    /// A socket watcher (`coordfs watch`) hears changes from outside with no process named.
    @Test(arguments: scopes)
    func watchersOnTheSocketHearThemWithNoProcess(byDirectory: Bool) throws {
        let fx = try MountFixture(byDirectory ? ["--backing-watch-by-directory"] : [])
        try fx.seed("dir/doc.txt")
        let watcher = try Child(Paths.binary.path, ["watch", fx.path("dir")])
        // Its watch is in place once a change is heard: appended to until then.
        var line: String?
        for _ in 0..<20 where line == nil {
            try behind("echo more >> '\(fx.backingPath("dir/doc.txt"))'")
            line = watcher.next(timeout: .milliseconds(500))
        }
        #expect(line == "\(fx.path("dir")) SUBITEM_CHANGED doc.txt via=outside", "\(line ?? "nothing")")
        while watcher.next(timeout: .milliseconds(300)) != nil {}  // the retries' appends
        let dir = fx.backingPath("dir"), watched = fx.path("dir")
        func heard(_ command: String) throws -> [String] {
            try behind(command)
            var lines: [String] = []
            while let line = watcher.next(timeout: .milliseconds(500)) { lines.append(line) }
            return lines
        }
        #expect(try heard("truncate -s 0 '\(dir)/doc.txt'") == ["\(watched) SUBITEM_CHANGED doc.txt via=outside"])
        #expect(try heard("mkdir '\(dir)/sub'") == ["\(watched) SUBITEM_APPEARED sub via=outside"])
        #expect(try heard("touch '\(dir)/new.txt'") == ["\(watched) SUBITEM_APPEARED new.txt via=outside"])
        let moved = try heard("mv '\(dir)/new.txt' '\(dir)/moved.txt'")
        #expect(
            moved.count == 2 && moved[0].hasPrefix("\(watched) MOVED_FROM new.txt cookie=")
                && moved[1].hasPrefix("\(watched) MOVED_TO moved.txt cookie=")
                && moved.allSatisfy { $0.hasSuffix(" via=outside") }
                && moved[0].split(separator: " ")[3] == moved[1].split(separator: " ")[3], "\(moved)")
        #expect(try heard("rm '\(dir)/moved.txt'") == ["\(watched) SUBITEM_DELETED moved.txt via=outside"])
    }

    /// The mount's own writes through kernel passthrough carry the writing program's process:
    /// they are known by that process and the mount's open files, not by a time after the
    /// close. Another program's write behind the mount beside such an open, or just after it
    /// closed, is told as from outside (P21); the mount's own writer is told once, as the
    /// mount's (P9).
    @Test("P21 a write behind the mount beside the mount's own writer, or just after it, is told as from outside")
    func aWriteBehindBesideOrJustAfterTheMountsOwnIsTold() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "v1\n")
        let doc = fx.path("doc.txt"), backing = fx.backingPath("doc.txt")
        let watcher = try Child(Paths.binary.path, ["watch", doc, "--events", "CHANGED"])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        func heard() -> [String] {
            var lines: [String] = []
            while let line = watcher.next(timeout: .milliseconds(500)) { lines.append(line) }
            return lines
        }
        let writer = try Child.holder()
        #expect(writer.ask("open w \(doc)") == "ok 1")
        try behind("echo beside >> '\(backing)'")
        #expect(heard() == ["\(doc) CHANGED via=outside"])
        #expect(writer.ask("write 1 mine") == "ok")
        #expect(writer.ask("close 1") == "ok")
        try behind("echo after >> '\(backing)'")
        // In either order: the kernel sends the release after close(2) has returned.
        let after = heard()
        #expect(after.filter { $0.hasSuffix(" via=outside") } == ["\(doc) CHANGED via=outside"], "\(after)")
        #expect(
            after.filter { $0.hasPrefix("\(doc) CHANGED pid=\(writer.pid) ") && $0.hasSuffix(" via=mount") }.count == 1,
            "\(after)")
        #expect(try String(contentsOfFile: backing, encoding: .utf8) == "v1\nbeside\nmine\nafter\n")
    }

    /// A user without CAP_SYS_ADMIN cannot mark the backing filesystem: its mount marks each
    /// directory by itself, and changes behind it still reach presenters and readers through
    /// it. (uid 65534, mounting through fusermount3 as any user does.)
    @Test func aMountWithoutThePrivilegeMarksEachDirectoryByItself() throws {
        let nobody: uid_t = 65534
        try withNobodysMount { fx in
            /// As the user: without `allow_other`, nobody else may use the mount, root neither.
            @discardableResult
            func asNobody(_ command: String) throws -> String {
                let result = try run(asUser(nobody)[0], Array(asUser(nobody).dropFirst()) + ["/bin/sh", "-c", command])
                #expect(result.status == 0, "\(command): \(result.errors)")
                return result.output
            }
            func statistics() throws -> [String: Int] {
                let json = try asNobody(
                    "python3 -c \"import os; print(os.getxattr('\(fx.mountPoint.path)', 'user.coordfs.stats').decode())\""
                )
                return try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Int] ?? [:]
            }
            #expect(try statistics()["watches_backing"] == 1)
            #expect(try statistics()["watched_directories"] == 1, "the backing directory's own mark")
            try asNobody("mkdir '\(fx.path("dir"))' && echo v1 > '\(fx.path("dir/doc.txt"))'")
            #expect(
                eventually { (try? statistics()["watched_directories"]) == 2 },
                "a directory made through the mount is marked")
            let watcher = try Child(
                asUser(nobody)[0], Array(asUser(nobody).dropFirst()) + [Paths.binary.path, "watch", fx.path("dir")])
            defer { watcher.signal(SIGTERM) }
            // Its watch is in place once a change is heard: appended to until then.
            var line: String?
            for _ in 0..<20 where line == nil {
                try behind("echo more >> '\(fx.backingPath("dir/doc.txt"))'")
                line = watcher.next(timeout: .milliseconds(500))
            }
            #expect(line == "\(fx.path("dir")) SUBITEM_CHANGED doc.txt via=outside", "\(line ?? "nothing")")
            try behind("echo v2 > '\(fx.backingPath("dir/doc.txt"))' && mkdir '\(fx.backingPath("dir/sub"))'")
            #expect(try asNobody("cat '\(fx.path("dir/doc.txt"))'; ls '\(fx.path("dir"))'") == "v2\ndoc.txt\nsub\n")
            #expect(
                eventually { (try? statistics()["watched_directories"]) == 3 },
                "a directory made behind the mount is marked")
        }
    }

    /// With a mark per directory, directories come and go behind the mount and through it:
    /// each new one is marked (what a directory made behind the mount already holds is told
    /// as appearing), a renamed one is followed, a removed one forgotten.
    @Test func aMarkPerDirectoryFollowsDirectoriesMadeMovedAndRemoved() throws {
        let fx = try MountFixture(inProcess: { $0.watchesBackingByDirectory = true })
        try fx.seed("top/old/doc.txt", "v1\n")
        let elsewhere = fx.base.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(
            at: elsewhere.appendingPathComponent("inner"), withIntermediateDirectories: true)
        try "x\n".write(to: elsewhere.appendingPathComponent("inner/f.txt"), atomically: false, encoding: .utf8)
        #expect(eventually { (try? fx.statistics()["watched_directories"]) == 3 }, "the root, top and top/old")
        let log = EventLog()
        fx.domain!.addFilePresenter(OriginPresenter("T", fx.path("top"), log: log))
        let top = fx.backingPath("top")

        // Made behind the mount with what it holds at once, then written in.
        try behind("mkdir -p '\(top)/a/b/c' && echo hi > '\(top)/a/b/c/f.txt'")
        #expect(log.waitFor("T:subitemDidAppear f.txt via outside"), "\(log.events)")
        try behind("echo more >> '\(top)/a/b/c/f.txt'")
        #expect(
            log.waitFor("T:subitemDidChange f.txt via outside"), "a change in a directory made behind: \(log.events)")
        // Made through the mount, then written in behind it.
        try behind("mkdir '\(fx.path("top/made"))'")
        #expect(eventually { ((try? fx.statistics()["watched_directories"]) ?? 0) >= 7 })
        try behind("echo x > '\(top)/made/g.txt'")
        #expect(
            log.waitFor("T:subitemDidAppear g.txt via outside"),
            "a change in a directory made through the mount: \(log.events)")
        // Renamed behind the mount: changes in it are told at its new place.
        let presenter = OriginPresenter("F", fx.path("top/old/doc.txt"), log: log)
        fx.domain!.addFilePresenter(presenter)
        try behind("mv '\(top)/old' '\(top)/new'")
        #expect(log.waitFor("T:subitemDidMove old new via outside"), "\(log.events)")
        try behind("echo v2 > '\(top)/new/doc.txt'")
        #expect(eventually { presenter.presentedItemURL?.path == fx.path("top/new/doc.txt") })
        #expect(
            log.waitFor("F:didChange via outside"), "a change in a directory renamed behind the mount: \(log.events)")
        // Moved in from elsewhere on the filesystem, with what it holds.
        try behind("mv '\(elsewhere.path)' '\(top)/moved-in'")
        #expect(log.waitFor("T:subitemDidAppear moved-in via outside"))
        #expect(
            log.waitFor("T:subitemDidAppear f.txt via outside")
                && eventually { log.count("T:subitemDidAppear f.txt via outside") >= 2 },
            "what the moved-in directory holds: \(log.events)")
        try behind("echo y >> '\(top)/moved-in/inner/f.txt'")
        #expect(eventually { log.count("T:subitemDidChange f.txt via outside") >= 2 }, "\(log.events)")
        // Removed: forgotten.
        let before = try #require(try fx.statistics()["watched_directories"])
        try behind("rm -r '\(top)/a'")
        #expect(eventually { ((try? fx.statistics()["watched_directories"]) ?? before) == before - 3 })
        #expect(try behind("ls '\(fx.path("top"))'") == "made\nmoved-in\nnew\n")
    }

    /// Directories exchanged (renameat2 RENAME_EXCHANGE), a name reused at once, a directory
    /// moved out of BACKING and back with a new directory in it: each stays itself, and changes
    /// in each are told at its place.
    @Test func aMarkPerDirectoryKeepsEachDirectoryThroughExchangesReusedNamesAndReturns() throws {
        let fx = try MountFixture(inProcess: { $0.watchesBackingByDirectory = true })
        try fx.seed("top/a/in-a.txt", "a\n")
        try fx.seed("top/b/in-b.txt", "b\n")
        let log = EventLog()
        fx.domain!.addFilePresenter(OriginPresenter("T", fx.path("top"), log: log))
        let top = fx.backingPath("top")
        #expect(eventually { (try? fx.statistics()["watched_directories"]) == 4 })
        // Exchanged: what was a is now b, and the other way round.
        try behind(
            """
            python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); \
            r = libc.renameat2(-100, b'\(top)/a', -100, b'\(top)/b', 2); \
            os._exit(0 if r == 0 else 1)"
            """)
        try behind("echo more >> '\(top)/b/in-a.txt'")
        #expect(log.waitFor("T:subitemDidChange in-a.txt via outside"), "\(log.events)")
        try behind("echo more >> '\(top)/a/in-b.txt'")
        #expect(log.waitFor("T:subitemDidChange in-b.txt via outside"), "\(log.events)")
        // A name reused before the watch reads the rename: both directories are watched.
        try behind("mkdir '\(top)/x' && mv '\(top)/x' '\(top)/y' && mkdir '\(top)/x'")
        #expect(eventually { (try? fx.statistics()["watched_directories"]) == 6 })
        try behind("echo f > '\(top)/y/in-y.txt'")
        #expect(log.waitFor("T:subitemDidAppear in-y.txt via outside"), "\(log.events)")
        try behind("echo f > '\(top)/x/in-x.txt'")
        #expect(log.waitFor("T:subitemDidAppear in-x.txt via outside"), "\(log.events)")
        // Out of BACKING, changed there, and back.
        let outside = fx.base.appendingPathComponent("away").path
        try behind("mv '\(top)/y' '\(outside)'")
        #expect(eventually { (try? fx.statistics()["watched_directories"]) == 5 })
        try behind("mkdir '\(outside)/new' && mv '\(outside)' '\(top)/back'")
        #expect(eventually { (try? fx.statistics()["watched_directories"]) == 7 })
        try behind("echo g > '\(top)/back/new/g.txt'")
        #expect(log.waitFor("T:subitemDidAppear g.txt via outside"), "a directory made while away: \(log.events)")
        #expect(try behind("ls '\(fx.path("top"))'") == "a\nb\nback\nx\n")
    }

    /// A file the kernel asks about again is marked for its writes behind the mount: the kernel
    /// keeps its attributes as long as names, and a program that writes it behind the mount and
    /// keeps it open (a log) is seen at each write, not at its close. An open for writing
    /// through the mount takes the mark away (those writes are the mount's): not kept at all
    /// while it is open, and a short time after until asked about again.
    @Test func aFileAskedAboutAgainIsKeptLongAndEachWriteBehindIsSeen() throws {
        let fx = try MountFixture()
        try fx.seed("log.txt", "one\n")
        let mounted = fx.path("log.txt")
        func size() throws -> String {
            try behind("stat -c %s '\(mounted)'").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func statistic(_ name: String) throws -> Int { try #require(fx.statistics()[name], "no \(name)") }
        #expect(try size() == "4")  // looked up: kept a second
        Thread.sleep(forTimeInterval: 1.3)
        #expect(try size() == "4")  // asked again: marked
        #expect(try statistic("files_watched_for_writes") == 1)
        let asked = try statistic("attribute_requests")
        Thread.sleep(forTimeInterval: 1.3)
        for _ in 0..<3 { #expect(try size() == "4") }
        #expect(try statistic("attribute_requests") == asked, "the kernel asked again: not kept long")

        // A writer behind the mount that keeps the file open.
        func appender(_ path: String) throws -> Child {
            try Child(
                "/usr/bin/python3",
                [
                    "-u", "-c",
                    """
                    import os, sys
                    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
                    for line in sys.stdin:
                        os.write(fd, line.encode())
                        print("wrote", flush=True)
                    """, path
                ])
        }
        let writer = try appender(fx.backingPath("log.txt"))
        writer.send("two")
        #expect(writer.next() == "wrote")
        #expect(
            eventually(.milliseconds(500)) { (try? size()) == "8" },
            "a write behind the mount unseen while its writer keeps it open")
        writer.send("three")
        #expect(writer.next() == "wrote")
        #expect(eventually(.milliseconds(500)) { (try? size()) == "14" })
        #expect(try statistic("files_watched_for_writes") == 1)
        writer.signal(SIGTERM)

        // Written through another link, outside BACKING: known by the file, not by that name.
        let outside = fx.base.appendingPathComponent("outside-link").path
        try behind("ln '\(fx.backingPath("log.txt"))' '\(outside)'")
        #expect(try size() == "14")
        let linkWriter = try appender(outside)
        linkWriter.send("3")
        #expect(linkWriter.next() == "wrote")
        #expect(
            eventually(.milliseconds(500)) { (try? size()) == "16" }, "a write through a link outside BACKING unseen")
        linkWriter.signal(SIGTERM)
        try behind("chmod 600 '\(outside)'")
        #expect(eventually(.milliseconds(500)) { (try? behind("stat -c %a '\(mounted)'")) == "600\n" }, "a stale mode")

        // Open for writing through the mount: the mark goes, and the kernel keeps nothing of
        // it while that writer has it (its writes through a mapping would go unseen).
        let mountWriter = try appender(mounted)
        mountWriter.send("four")
        #expect(mountWriter.next() == "wrote")
        #expect(try size() == "21")
        let before = try statistic("attribute_requests")
        Thread.sleep(forTimeInterval: 1.3)
        #expect(try size() == "21")
        #expect(try statistic("attribute_requests") > before, "kept long while the mount's own writer had it")
        mountWriter.signal(SIGTERM)
    }

    /// Files watched for their writes are bounded (`WatchedWrites.markLimit`, each holding its
    /// backing inode in memory): past that every mark goes, the kernel forgets what it kept long
    /// of them and asks again, and marking begins anew.
    @Test func pastTheBoundEveryFilesMarkGoesAndTheKernelAsksAgain() throws {
        let bound = WatchedWrites.markLimit, count = bound + 100
        let fx = try MountFixture()
        try fx.seed("many/.keep", "")
        func statistic(_ name: String) throws -> Int { try #require(fx.statistics()[name], "no \(name)") }
        // Made behind the mount, and told (the kernel forgets the names as it is told), first.
        try fx.settled {
            let made = try run(
                "/usr/bin/python3",
                [
                    "-c",
                    """
                    import os, sys
                    for i in range(int(sys.argv[2])):
                        os.close(os.open(f"{sys.argv[1]}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
                    """, fx.backingPath("many"), String(count)
                ])
            #expect(made.status == 0, "\(made.errors)")
        }
        let asked = try run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import os, sys, time
                mounted, count = sys.argv[1], int(sys.argv[2])
                for i in range(count):
                    os.stat(f"{mounted}/f{i}")      # looked up: kept a second
                time.sleep(1.3)
                for i in range(count):
                    os.stat(f"{mounted}/f{i}")      # asked again: marked
                """, fx.path("many"), String(count)
            ])
        #expect(asked.status == 0, "\(asked.errors)")
        #expect(try statistic("files_watched_for_writes") == count - bound, "a new generation of marks")
        let requests = try statistic("attribute_requests")
        try behind("stat '\(fx.path("many/f\(count - 1)"))' >/dev/null")
        #expect(try statistic("attribute_requests") == requests, "marked in the new generation: kept long")
        try behind("stat '\(fx.path("many/f0"))' >/dev/null")
        let afterFirst = try statistic("attribute_requests")
        #expect(afterFirst > requests, "marked in the old one: the kernel must ask again")
        try behind("stat '\(fx.path("many/f0"))' >/dev/null")
        #expect(try statistic("attribute_requests") == afterFirst, "marked again: kept long")
        // Still seen as it is written behind the mount, without a close.
        try behind(
            "(python3 -c \"import os, time; fd = os.open('\(fx.backingPath("many/f0"))', os.O_WRONLY); os.write(fd, b'x'); time.sleep(2)\" >/dev/null 2>&1 &)"
        )
        #expect(eventually(.milliseconds(500)) { (try? behind("stat -c %s '\(fx.path("many/f0"))'")) == "1\n" })
    }

    /// A hundred thousand files made behind the mount, and a rename storm: the mount keeps
    /// answering, sees every name, and a directory's presenter hears the flood as a few
    /// changes of the directory, not one message per file.
    @Test func aFloodOfChangesNeitherLosesTheMountNorFloodsPresenters() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("many/.keep", "")
        let log = EventLog()
        fx.domain!.addFilePresenter(OriginPresenter("D", fx.path("many"), log: log))
        let made = try run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import os, sys
                base = sys.argv[1]
                for i in range(100000):
                    os.close(os.open(f"{base}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
                for i in range(5000):
                    os.rename(f"{base}/f0", f"{base}/g0")
                    os.rename(f"{base}/g0", f"{base}/f0")
                """, fx.backingPath("many")
            ])
        #expect(made.status == 0, "\(made.errors)")
        #expect(log.waitFor("D:didChange via outside", timeout: .seconds(60)), "the flood was not told")
        let listed = try run("/bin/sh", ["-c", "ls -f '\(fx.path("many"))' | wc -l"])
        // with . and ..
        #expect(listed.output.trimmingCharacters(in: .whitespacesAndNewlines) == "100003", "\(listed)")
        Thread.sleep(forTimeInterval: 1)
        let kinds = Dictionary(grouping: log.events, by: { $0.split(separator: " ").first.map(String.init) ?? "" })
            .mapValues(\.count)
        #expect(log.events.count < 5_000, "\(log.events.count) messages for 110 000 changes: \(kinds)")
        #expect(try behind("stat -c %s '\(fx.path("many/f0"))'") == "0\n")
    }

    /// With the filesystem's mark, the version store's directories are marked for the kernel
    /// to leave out what happens in them (each version kept is a link into its content), once
    /// the first version kept has made them: the watch's thread is not woken to drop it.
    @Test(
        .enabled(
            if: geteuid() == 0 && kernelIsAtLeast(6, 0), "a filesystem's mark needs root, its ignore marks Linux 6.0"))
    func theVersionStoresOwnChangesAreLeftOutByTheKernel() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("doc.txt", "one\n")
        let saved = try run(
            "/bin/sh", ["-c", "echo two > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"", "sh", fx.path("doc.txt")])
        #expect(saved.status == 0, "\(saved.errors)")
        for (relative, onDirectories) in [(".coordfs-versions", false), (".coordfs-versions/content", true)] {
            var info = stat()
            try #require(lstat(fx.backingPath(relative), &info) == 0, "no \(relative): no version was kept")
            let inode = UInt64(info.st_ino)
            let mask = { fanotifyIgnoreMasks(ofInode: inode).first { $0 != 0 } }
            #expect(eventually { mask() != nil }, "\(relative) is not marked")
            // Entries made and removed, their attributes and writes; directories in the
            // content's only, so that the content's own making is seen.
            let ignored = mask() ?? 0
            #expect(
                ignored & UInt64(CFS_CHANGE_CREATE | CFS_CHANGE_DELETE)
                    == UInt64(CFS_CHANGE_CREATE | CFS_CHANGE_DELETE), "\(String(ignored, radix: 16))")
            #expect(ignored & UInt64(CFS_CHANGE_RENAME) == 0)
            #expect(
                (ignored & UInt64(CFS_CHANGE_ON_DIRECTORY) != 0) == onDirectories,
                "\(relative): \(String(ignored, radix: 16))")
        }
        #expect(try fx.statistics()["versions_kept"] == 1)
    }

    /// The ignore marks the watch asks for (`cfs_fanotify_ignore_directory`), under a
    /// filesystem's mark, as the kernel keeps them: what happens inside the directory is left
    /// out; a rename out of it (an item appearing in BACKING) is still told, and, in a directory
    /// marked without its directories, a directory made in it.
    @Test(
        .enabled(
            if: geteuid() == 0 && kernelIsAtLeast(6, 0), "a filesystem's mark needs root, its ignore marks Linux 6.0"))
    func aDirectoryMarkedToBeIgnoredIsLeftOutButForRenamesOutOfIt() throws {
        let root = "/tmp/coordfs-ignored-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root + "/store/content", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let group = cfs_fanotify_watch_filesystem(root)
        try #require(group >= 0, "fanotify: \(String(cString: strerror(-group)))")
        defer { close(group) }
        for (relative, directories) in [("/store", Int32(0)), ("/store/content", Int32(1))] {
            let fd = open(root + relative, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(fd) }
            #expect(cfs_fanotify_ignore_directory(group, fd, directories) == 0)
        }
        // Names of this test's own: the mark sees the whole filesystem, other tests' too.
        let tag = String(UUID().uuidString.prefix(8))
        func write(_ relative: String) throws { try Data("x".utf8).write(to: URL(fileURLWithPath: root + relative)) }
        try write("/doc-\(tag)")  // told: BACKING's own
        #expect(link(root + "/doc-\(tag)", root + "/store/content/link-\(tag)") == 0)
        try write("/store/content/copy-\(tag)")
        #expect(chmod(root + "/store/content/copy-\(tag)", 0o600) == 0)
        #expect(unlink(root + "/store/content/copy-\(tag)") == 0)
        #expect(mkdir(root + "/store/content/sub-\(tag)", 0o700) == 0)
        try write("/store/journal-\(tag)")
        #expect(mkdir(root + "/store/made-\(tag)", 0o700) == 0)  // told: a directory in the store's
        #expect(rename(root + "/store/content/link-\(tag)", root + "/moved-\(tag)") == 0)  // told: out of content
        var told: [(mask: UInt64, names: [String])] = []
        var buffer = [CChar](repeating: 0, count: 64 * 1024)
        while true {
            let count = read(group, &buffer, buffer.count)
            if count <= 0 { break }  // EAGAIN: read up
            buffer.withUnsafeBufferPointer { bytes in
                var offset = 0
                var change = cfs_backing_change()
                while cfs_fanotify_next(bytes.baseAddress!, count, &offset, &change) == 1 {
                    let names = [change.name, change.new_name].compactMap { $0.map { String(cString: $0) } }.filter {
                        $0.hasSuffix(tag)
                    }
                    if !names.isEmpty { told.append((change.mask, names)) }
                }
            }
        }
        let renames = told.filter { $0.mask & UInt64(CFS_CHANGE_RENAME) != 0 }.flatMap(\.names)
        let others = Set(told.filter { $0.mask & UInt64(CFS_CHANGE_RENAME) == 0 }.flatMap(\.names))
        #expect(others.isSuperset(of: ["doc-\(tag)", "made-\(tag)"]), "\(told)")
        #expect(others.isDisjoint(with: ["link-\(tag)", "copy-\(tag)", "sub-\(tag)", "journal-\(tag)"]), "\(told)")
        #expect(renames == ["link-\(tag)", "moved-\(tag)"], "\(told)")
    }
}

/// Whether the running kernel is `major`.`minor` or later.
func kernelIsAtLeast(_ major: Int, _ minor: Int) -> Bool {
    var names = utsname()
    guard uname(&names) == 0 else { return false }
    let release = withUnsafeBytes(of: names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    let numbers = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
    guard numbers.count == 2 else { return false }
    return (numbers[0], numbers[1]) >= (major, minor)
}

/// The ignore masks of the marks on the inode numbered `inode` in this process's fanotify
/// groups, as /proc shows each mark (`fanotify ino:HEX sdev:HEX mflags:HEX mask:HEX
/// ignored_mask:HEX ...`).
func fanotifyIgnoreMasks(ofInode inode: UInt64) -> [UInt64] {
    let prefix = "fanotify ino:\(String(inode, radix: 16)) "
    var masks: [UInt64] = []
    for fd in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
        guard
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd))
                == "anon_inode:[fanotify]",
            let info = try? String(contentsOfFile: "/proc/self/fdinfo/" + fd, encoding: .utf8)
        else { continue }
        for line in info.split(separator: "\n") where line.hasPrefix(prefix) {
            if let field = line.split(separator: " ").first(where: { $0.hasPrefix("ignored_mask:") }),
                let mask = UInt64(field.dropFirst("ignored_mask:".count), radix: 16)
            {
                masks.append(mask)
            }
        }
    }
    return masks
}

/// Runs `body` with /dev/fuse open to every user, as a stock system has it (udev makes it
/// 0666) and machines like the tests' do not (0600); its mode is put back after.
func withFuseOpenToUsers(_ body: () throws -> Void) throws {
    var info = stat()
    try #require(stat("/dev/fuse", &info) == 0, "no /dev/fuse")
    let mode = info.st_mode & 0o7777
    try #require(chmod("/dev/fuse", 0o666) == 0, "cannot open /dev/fuse to users: \(String(cString: strerror(errno)))")
    defer { chmod("/dev/fuse", mode) }
    try body()
}

/// Runs `body` with a mount made by nobody (uid 65534, through fusermount3, as any user
/// mounts: `withFuseOpenToUsers`); its control sockets' directory is removed before and after.
func withNobodysMount(_ body: (MountFixture) throws -> Void) throws {
    let nobody: uid_t = 65534
    try withFuseOpenToUsers {
        let sockets = "/tmp/coordfs-\(nobody)"
        try? FileManager.default.removeItem(atPath: sockets)
        defer { try? FileManager.default.removeItem(atPath: sockets) }
        try body(try MountFixture(user: nobody))
    }
}
