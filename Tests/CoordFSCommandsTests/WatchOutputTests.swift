@testable import CoordFSCommands
import CoordinationWire
import Testing

/// What `coordfs watch` prints of an event: paths as given, -r's reach, inotify's names.
@Suite struct WatchOutputTests {
    static let watched = ["/mnt/d": "d/"]

    static func event(_ mask: EventMask, name: String) -> EventRecord {
        EventRecord(wd: 1, mask: mask, cookie: 0, name: name, path: name.isEmpty ? "/mnt/d" : "/mnt/d/" + name)
    }

    @Test func pathsArePrintedAsGivenAndDeeperItemsOnlyWithRecursive() throws {
        let flat = EventView(given: Self.watched, recursive: false, inotifyNames: false)
        let shown = try #require(flat.show(Self.event(.subitemAppeared, name: "new")))
        #expect(String(decoding: shown.directory, as: UTF8.self) == "d" && String(decoding: shown.name, as: UTF8.self) == "new")
        #expect(flat.show(Self.event(.subitemAppeared, name: "sub/deep")) == nil)
        let deep = EventView(given: Self.watched, recursive: true, inotifyNames: false)
        let inside = try #require(deep.show(Self.event(.subitemAppeared, name: "sub/deep")))
        #expect(String(decoding: inside.directory, as: UTF8.self) == "d/sub" && String(decoding: inside.name, as: UTF8.self) == "deep")
        let line = EventFormat("%w|%f|%e", timeFormat: "%H").line(for: Self.event(.subitemAppeared, name: "sub/deep"), shown: inside)
        #expect(String(decoding: line, as: UTF8.self) == "d/sub/|deep|SUBITEM_APPEARED\n")
    }

    @Test func inotifysNamesStandForTheEventsThatTellTheSame() {
        let view = EventView(given: Self.watched, recursive: true, inotifyNames: true)
        let cases: [(EventMask, String, [String]?)] = [
            (.subitemAppeared, "f", ["CREATE"]), (.subitemChanged, "f", ["MODIFY"]), (.changed, "", ["MODIFY"]),
            (.movedFrom, "f", ["MOVED_FROM"]), (.movedTo, "g", ["MOVED_TO"]), (.movedFrom, "", ["MOVE_SELF"]),
            (.movedTo, "", nil), (.subitemDeleted, "f", ["DELETE"]), (.presenterRemoved, "", ["DELETE_SELF"]),
            ([.save, .request], "", nil), (.reacquire, "", nil), (.broken, "", nil),
        ]
        for (mask, name, expected) in cases {
            // The items do not exist: no ISDIR is added.
            #expect(view.show(Self.event(mask, name: name))?.events == expected, "\(mask.names) \(name)")
        }
        #expect(EventView.inotifyAliases["MODIFY"] == ["CHANGED", "SUBITEM_CHANGED"])
    }
}
