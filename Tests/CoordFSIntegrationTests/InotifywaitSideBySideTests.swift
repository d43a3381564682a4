import Foundation
import TestSupport
import Testing

/// A script written for inotifywait reads coordfs watch's lines unchanged: the same tree
/// changes, through the mount, seen by `inotifywait -m -r` and `coordfs watch -m -r
/// --inotify-events` with the same options, print the same lines, in inotifywait's own format
/// or a --format string; and the watch starts and ends as inotifywait's does.
@Suite struct InotifywaitSideBySideTests {
    static let inotifywait = "/usr/bin/inotifywait"
    static let hasInotifywait = FileManager.default.isExecutableFile(atPath: inotifywait)

    /// inotifywait with `options` on `path`, once its watches are set.
    static func inotifywait(_ options: [String], _ path: String) throws -> Child {
        // Without -q inotifywait says on stderr when its watches are set: wait for that.
        let child = try Child("/bin/sh", ["-c", "exec \"$0\" \"$@\" 2>&1", Self.inotifywait] + options + [path])
        while let line = child.next(), line != "Watches established." {}
        return child
    }

    /// The next `count` lines of `child`, fewer if it says no more within 5 s.
    static func lines(_ child: Child, _ count: Int) -> [String] {
        var lines: [String] = []
        while lines.count < count, let line = child.next(timeout: .seconds(5)) { lines.append(line) }
        return lines
    }

    @Test(.enabled(if: hasInotifywait, "needs inotify-tools (make setup installs it)"))
    func theSameChangesPrintTheSameLines() throws {
        let fx = try MountFixture()
        try FileManager.default.createDirectory(atPath: fx.backingPath("d"), withIntermediateDirectories: true)
        let directory = fx.path("d")
        let events = "create,modify,moved_from,moved_to,delete", format = "%w|%f|%e"
        // Without -q inotifywait says on stderr when its watches are set: wait for that.
        let theirs = try Child(
            "/bin/sh",
            [
                "-c", "exec \"$0\" -m -r -e \(events) --format '\(format)' \"$1\" 2>&1",
                Self.inotifywait, directory
            ])
        while let line = theirs.next(), line != "Watches established." {}
        let ours = try Child(
            Paths.binary.path,
            ["watch", "-m", "-q", "-r", "--inotify-events", "-e", events, "--format", format, directory])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let changes = """
            cd "$1" && mkdir sub && sleep 0.05 && : > a && sleep 0.05 && echo x >> a && sleep 0.05 && : > sub/c && sleep 0.05 \
            && echo y >> sub/c && sleep 0.05 && mv a b && sleep 0.05 && rm b && sleep 0.05 && rm sub/c && sleep 0.05 \
            && rmdir sub && sleep 0.05 && touch t
            """
        #expect(try run("/bin/sh", ["-c", changes, "sh", directory]).status == 0)
        let expected = [
            "\(directory)/|sub|CREATE,ISDIR", "\(directory)/|a|CREATE", "\(directory)/|a|MODIFY",
            "\(directory)/sub/|c|CREATE", "\(directory)/sub/|c|MODIFY", "\(directory)/|a|MOVED_FROM",
            "\(directory)/|b|MOVED_TO", "\(directory)/|b|DELETE", "\(directory)/sub/|c|DELETE",
            "\(directory)/|sub|DELETE,ISDIR", "\(directory)/|t|CREATE"
        ]
        func lines(_ child: Child) -> [String] {
            var lines: [String] = []
            while lines.count < expected.count, let line = child.next(timeout: .seconds(5)) { lines.append(line) }
            return lines
        }
        let inotify = lines(theirs), coordfs = lines(ours)
        #expect(inotify == expected, "inotifywait printed \(inotify)")
        #expect(coordfs == inotify, "coordfs watch printed \(coordfs)")
    }

    /// inotifywait's own lines (`DIR/ EVENTS NAME`) for the events of the script:
    /// a writer's close is CLOSE_WRITE, chmod is ATTRIB (it was MODIFY, and the lines carried
    /// pid=, command= and via= and no trailing "/").
    @Test(.enabled(if: hasInotifywait, "needs inotify-tools (make setup installs it)"))
    func inotifywaitsOwnLinesForTheSameChanges() throws {
        let fx = try MountFixture()
        try FileManager.default.createDirectory(atPath: fx.backingPath("d"), withIntermediateDirectories: true)
        let directory = fx.path("d")
        let events = "create,close_write,moved_from,moved_to,delete,attrib"
        let theirs = try Self.inotifywait(["-m", "-r", "-e", events], directory)
        let ours = try Child(
            Paths.binary.path, ["watch", "-m", "-r", "-q", "--inotify-events", "-e", events, directory])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let changes = """
            cd "$1" && mkdir sub && sleep 0.05 && : > a && sleep 0.05 && echo x >> a && sleep 0.05 && chmod 600 a \
            && sleep 0.05 && mv a b && sleep 0.05 && echo y > sub/c && sleep 0.05 && rm b && sleep 0.05 && rm sub/c \
            && sleep 0.05 && rmdir sub
            """
        #expect(try run("/bin/sh", ["-c", changes, "sh", directory]).status == 0)
        let expected = [
            "\(directory)/ CREATE,ISDIR sub", "\(directory)/ CREATE a", "\(directory)/ CLOSE_WRITE,CLOSE a",
            "\(directory)/ CLOSE_WRITE,CLOSE a", "\(directory)/ ATTRIB a", "\(directory)/ MOVED_FROM a",
            "\(directory)/ MOVED_TO b",
            "\(directory)/sub/ CREATE c", "\(directory)/sub/ CLOSE_WRITE,CLOSE c", "\(directory)/ DELETE b",
            "\(directory)/sub/ DELETE c", "\(directory)/ DELETE,ISDIR sub"
        ]
        let inotify = Self.lines(theirs, expected.count), coordfs = Self.lines(ours, expected.count)
        #expect(inotify == expected, "inotifywait printed \(inotify)")
        #expect(coordfs == inotify, "coordfs watch printed \(coordfs)")
    }

    /// A watched file's own events end with a blank, as inotifywait's; its deletion is
    /// DELETE_SELF, then IGNORED, and ends the watch, which has nothing left to watch (inotifywait
    /// -m waits on without a watch: coordfs watch ends with status 0).
    @Test(.enabled(if: hasInotifywait, "needs inotify-tools (make setup installs it)"))
    func aWatchedFilesDeletionEndsItsWatch() throws {
        let fx = try MountFixture()
        try fx.seed("f.txt", "text\n")
        let file = fx.path("f.txt")
        let events = "close_write,delete_self,ignored"
        let theirs = try Self.inotifywait(["-m", "-e", events], file)
        let ours = try Child(Paths.binary.path, ["watch", "-m", "-q", "--inotify-events", "-e", events, file])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/sh", ["-c", "echo more >> \"$0\" && sleep 0.05 && rm \"$0\"", file]).status == 0)
        let expected = ["\(file) CLOSE_WRITE,CLOSE ", "\(file) DELETE_SELF ", "\(file) IGNORED "]
        let inotify = Self.lines(theirs, expected.count), coordfs = Self.lines(ours, expected.count)
        #expect(inotify == expected, "inotifywait printed \(inotify)")
        #expect(coordfs == inotify, "coordfs watch printed \(coordfs)")
        #expect(ours.waitForExit(timeout: .seconds(5)) == 0, "the watch of a deleted file went on")
    }

    /// Without -m, as inotifywait: the first event ends the watch with status 0; a watched
    /// item deleted unasked for ends it with status 1, printing nothing.
    @Test(.enabled(if: hasInotifywait, "needs inotify-tools (make setup installs it)"))
    func withoutMonitorTheFirstEventEndsTheWatch() throws {
        let fx = try MountFixture()
        try fx.seed("f.txt", "text\n")
        let file = fx.path("f.txt")
        let theirs = try Self.inotifywait(["-e", "close_write"], file)
        let ours = try Child(Paths.binary.path, ["watch", "-q", "--inotify-events", "-e", "close_write", file])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/sh", ["-c", "echo one >> \"$0\" && echo two >> \"$0\"", file]).status == 0)
        #expect(theirs.next() == "\(file) CLOSE_WRITE,CLOSE ")
        #expect(ours.next() == "\(file) CLOSE_WRITE,CLOSE ")
        #expect(ours.waitForExit() == 0 && theirs.waitForExit() == 0)
        #expect(ours.next(timeout: .milliseconds(300)) == nil, "a second event was printed")
        let before = try Self.inotifywait(["-e", "modify"], file)
        let unasked = try Child(Paths.binary.path, ["watch", "-q", "--inotify-events", "-e", "modify", file])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/rm", [file]).status == 0)
        #expect(before.waitForExit() == 1 && unasked.waitForExit() == 1)
        #expect(unasked.next(timeout: .milliseconds(300)) == nil)
    }

    /// A path that is not there fails the watch in inotifywait's words; an event name that
    /// would never come is refused by name, saying why.
    @Test(.enabled(if: hasInotifywait, "needs inotify-tools (make setup installs it)"))
    func whatCannotBeWatchedIsRefusedAsInotifywaitRefusesIt() throws {
        let fx = try MountFixture()
        let missing = fx.path("missing")
        let theirs = try run(Self.inotifywait, ["-q", missing])
        let ours = try run(Paths.binary.path, ["watch", "-q", "--inotify-events", missing])
        #expect(
            theirs.status == 1 && theirs.errors == "Couldn't watch \(missing): No such file or directory\n", "\(theirs)"
        )
        #expect(ours.status == theirs.status && ours.errors == theirs.errors && ours.output.isEmpty, "\(ours)")
        let access = try run(
            Paths.binary.path, ["watch", "--inotify-events", "-e", "create,access", fx.mountPoint.path])
        #expect(access.status == 64 && access.errors.contains("'access' cannot be watched"), "\(access)")
        let unknown = try run(Paths.binary.path, ["watch", "--inotify-events", "-e", "creat", fx.mountPoint.path])
        #expect(unknown.status == 64 && unknown.errors.contains("unknown event name 'creat'"), "\(unknown)")
    }

    /// Without -r, as inotifywait without it, a watched directory's own entries only; requests
    /// about deeper items are still answered (the write below is not held up).
    @Test func withoutRecursiveOnlyTheDirectorysOwnEntries() throws {
        let fx = try MountFixture()
        try fx.settled {
            try FileManager.default.createDirectory(atPath: fx.backingPath("d/sub"), withIntermediateDirectories: true)
        }
        let directory = fx.path("d")
        let watcher = try Child(Paths.binary.path, ["watch", "-q", "--format", "%w|%f|%e", "-e", "create", directory])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(
            try run("/bin/sh", ["-c", "echo x > \"$1/sub/deep\" && echo y > \"$1/top\"", "sh", directory]).status == 0)
        #expect(watcher.next() == "\(directory)/|top|SUBITEM_APPEARED")
        #expect(watcher.next(timeout: .milliseconds(500)) == nil)
    }
}
