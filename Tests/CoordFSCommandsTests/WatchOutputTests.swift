@testable import CoordFSCommands
import CoordinationWire
import Foundation
import Testing

/// What `coordfs watch` prints of an event: paths as given, -r's reach, inotify's names.
@Suite struct WatchOutputTests {
    static let watched = ["/mnt/d": "d/"]

    static func event(_ mask: EventMask, name: String, under root: String = "/mnt/d") -> EventRecord {
        EventRecord(wd: 1, mask: mask, cookie: 0, name: name, path: name.isEmpty ? root : root + "/" + name)
    }

    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func pathsArePrintedAsGivenAndDeeperItemsOnlyWithRecursive() throws {
        let flat = EventView(given: Self.watched, recursive: false, inotifyNames: false)
        let shown = try #require(flat.show(Self.event(.subitemAppeared, name: "new")).first)
        #expect(Self.text(shown.directory) == "d" && Self.text(shown.name) == "new")
        #expect(flat.show(Self.event(.subitemAppeared, name: "sub/deep")).isEmpty)
        let deep = EventView(given: Self.watched, recursive: true, inotifyNames: false)
        let inside = try #require(deep.show(Self.event(.subitemAppeared, name: "sub/deep")).first)
        #expect(Self.text(inside.directory) == "d/sub" && Self.text(inside.name) == "deep")
        let line = EventFormat("%w|%f|%e", timeFormat: "%H").line(
            for: Self.event(.subitemAppeared, name: "sub/deep"), shown: inside)
        #expect(Self.text(line) == "d/sub/|deep|SUBITEM_APPEARED\n")
    }

    /// The channel's events as inotify names them, a line each in inotify's order: a writer's
    /// change is MODIFY then CLOSE_WRITE (told at its close), a file's making CREATE then
    /// CLOSE_WRITE, a change of attributes alone ATTRIB, the watched item's deletion
    /// DELETE_SELF then IGNORED, its move MOVE_SELF (no ISDIR on the item's own events).
    @Test func inotifysNamesStandForTheEventsThatTellTheSame() {
        let view = EventView(
            given: Self.watched, recursive: true, inotifyNames: true,
            choice: EventChoice(channel: [], inotify: [.all, .ignored]))
        let cases: [(EventMask, String, [[String]])] = [
            (.subitemAppeared, "f", [["CREATE"], ["CLOSE_WRITE", "CLOSE"]]),
            (.subitemChanged, "f", [["MODIFY"], ["CLOSE_WRITE", "CLOSE"]]),
            (.changed, "", [["MODIFY"], ["CLOSE_WRITE", "CLOSE"]]),
            ([.subitemChanged, .metadataOnly], "f", [["ATTRIB"]]), ([.changed, .metadataOnly], "", [["ATTRIB"]]),
            (.movedFrom, "f", [["MOVED_FROM"]]), (.movedTo, "g", [["MOVED_TO"]]), (.movedFrom, "", [["MOVE_SELF"]]),
            (.movedTo, "", []), (.subitemDeleted, "f", [["DELETE"]]),
            (.presenterRemoved, "", [["DELETE_SELF"], ["IGNORED"]]),
            ([.save, .request], "", []), (.reacquire, "", []), (.broken, "", [])
        ]
        for (mask, name, expected) in cases {
            // The items do not exist: no ISDIR is added.
            #expect(view.show(Self.event(mask, name: name)).map(\.events) == expected, "\(mask.names) \(name)")
        }
        // Only the events asked for: IGNORED only when named, as inotifywait prints it.
        let some = EventView(
            given: Self.watched, recursive: true, inotifyNames: true,
            choice: EventChoice(channel: [], inotify: [.closeWrite, .deleteSelf]))
        #expect(some.show(Self.event(.subitemChanged, name: "f")).map(\.events) == [["CLOSE_WRITE", "CLOSE"]])
        #expect(some.show(Self.event(.presenterRemoved, name: "")).map(\.events) == [["DELETE_SELF"]])
        #expect(some.show(Self.event([.subitemChanged, .metadataOnly], name: "f")).isEmpty)
    }

    /// inotifywait's own line, `%w %e %f`: a watched directory's %w ends with "/" whether or
    /// not it was given so, and an event of the watched item itself ends with a blank.
    @Test func theInotifyLineIsInotifywaits() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("watch-output-\(getpid())")
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("sub"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        try Data().write(to: root.appendingPathComponent("file"))
        let view = EventView(
            given: [root.path: "d", root.path + "/file": "d/file"], recursive: true, inotifyNames: true,
            choice: EventChoice(channel: [], inotify: [.all, .ignored]))
        func lines(_ record: EventRecord) -> [String] {
            view.show(record).map { Self.text(EventFormat.inotifywait.line(for: record, shown: $0)) }
        }
        #expect(lines(Self.event(.subitemDeleted, name: "gone", under: root.path)) == ["d/ DELETE gone\n"])
        #expect(
            lines(Self.event([.subitemChanged, .metadataOnly], name: "sub", under: root.path)) == [
                "d/ ATTRIB,ISDIR sub\n"
            ])
        #expect(
            lines(Self.event(.presenterRemoved, name: "", under: root.path)) == ["d/ DELETE_SELF \n", "d/ IGNORED \n"])
        #expect(
            lines(Self.event(.changed, name: "", under: root.path + "/file")) == [
                "d/file MODIFY \n", "d/file CLOSE_WRITE,CLOSE \n"
            ])
        // %Xe joins the events with X, as inotifywait's.
        let record = Self.event(.subitemChanged, name: "file", under: root.path)
        let shown = try #require(view.show(record).last)
        #expect(
            Self.text(EventFormat("%w%f %:e", timeFormat: "%H").line(for: record, shown: shown))
                == "d/file CLOSE_WRITE:CLOSE\n")
    }

    /// `-e` takes inotifywait's names beside coordfs's, and refuses by name what would never
    /// come, saying why.
    @Test func eventNamesAreInotifywaitsOrRefusedByName() throws {
        let choice = try Watch.parse(["--inotify-events", "-e", "close_write,ATTRIB", "-e", "delete_self", "d"])
            .eventChoice()
        #expect(choice.inotify == [.closeWrite, .attrib, .deleteSelf] && choice.channel.isEmpty)
        #expect(choice.asked == [.changed, .subitemChanged, .subitemAppeared, .presenterRemoved])
        // Without -e: every event; requests are asked only in coordfs's names.
        #expect(try Watch.parse(["--inotify-events", "d"]).eventChoice().asked.isDisjoint(with: .requests))
        #expect(try Watch.parse(["d"]).eventChoice().asked.isSuperset(of: .all))
        func refusal(_ arguments: [String]) -> String {
            do { _ = try Watch.parse(arguments); return "" } catch { return Watch.message(for: error) }
        }
        for word in ["access", "open", "close_nowrite"] {
            let said = refusal(["--inotify-events", "-e", "create,\(word)", "d"])
            #expect(said.contains("'\(word)' cannot be watched"), "\(said)")
        }
        let unknown = refusal(["-e", "create,sometimes", "d"])
        #expect(unknown.contains("unknown event name 'sometimes'") && unknown.contains("close_write"), "\(unknown)")
    }
}
