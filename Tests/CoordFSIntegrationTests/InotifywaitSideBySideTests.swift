import Foundation
import TestSupport
import Testing

/// A script written for inotifywait reads coordfs watch's lines unchanged: the same tree
/// changes, through the mount, seen by `inotifywait -m -r` and `coordfs watch -r
/// --inotify-events` with the same -e list and --format string, print the same lines.
@Suite struct InotifywaitSideBySideTests {
    static let inotifywait = "/usr/bin/inotifywait"

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: inotifywait), "needs inotify-tools (make setup installs it)"))
    func theSameChangesPrintTheSameLines() throws {
        let fx = try MountFixture()
        try FileManager.default.createDirectory(atPath: fx.backingPath("d"), withIntermediateDirectories: true)
        let directory = fx.path("d")
        let events = "create,modify,moved_from,moved_to,delete", format = "%w|%f|%e"
        // Without -q inotifywait says on stderr when its watches are set: wait for that.
        let theirs = try Child("/bin/sh", ["-c", "exec \"$0\" -m -r -e \(events) --format '\(format)' \"$1\" 2>&1",
                                           Self.inotifywait, directory])
        while let line = theirs.next(), line != "Watches established." {}
        let ours = try Child(Paths.binary.path, ["watch", "-q", "-r", "--inotify-events", "-e", events, "--format", format, directory])
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
            "\(directory)/|sub|DELETE,ISDIR", "\(directory)/|t|CREATE",
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

    /// Without -r, as inotifywait without it, a watched directory's own entries only; requests
    /// about deeper items are still answered (the write below is not held up).
    @Test func withoutRecursiveOnlyTheDirectorysOwnEntries() throws {
        let fx = try MountFixture()
        try fx.settled { try FileManager.default.createDirectory(atPath: fx.backingPath("d/sub"), withIntermediateDirectories: true) }
        let directory = fx.path("d")
        let watcher = try Child(Paths.binary.path, ["watch", "-q", "--format", "%w|%f|%e", "-e", "create", directory])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/sh", ["-c", "echo x > \"$1/sub/deep\" && echo y > \"$1/top\"", "sh", directory]).status == 0)
        #expect(watcher.next() == "\(directory)/|top|SUBITEM_APPEARED")
        #expect(watcher.next(timeout: .milliseconds(500)) == nil)
    }
}
