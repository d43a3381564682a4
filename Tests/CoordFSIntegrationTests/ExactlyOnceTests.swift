import FileCoordination
import Foundation
import TestSupport
import Testing

/// Every presenter message once per access (docs/swift.md): a Swift coordinator of this process
/// works through a mount, inside its accessor too, and a presenter in another process
/// (`presenter.py`, the documented protocol) hears each access once, in Apple's order.
@Suite(.serialized) struct ExactlyOnceAcrossProcesses {
    /// The remote presenter's events, request flags left out, until it has been quiet a moment.
    func events(_ remote: Child) -> [String] {
        var names: [String] = []
        while let line = remote.next(timeout: .milliseconds(500)),
            let record = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        {
            names.append(((record["events"] as? [String]) ?? []).filter { $0 != "REQUEST" }.joined(separator: ","))
        }
        return names
    }

    func presenter(of path: String) throws -> Child {
        let remote = try Child("/usr/bin/python3", [Paths.scripts.appendingPathComponent("presenter.py").path, path])
        #expect(remote.next()?.contains("\"ok\": true") == true && remote.next()?.contains("\"wd\"") == true)
        return remote
    }

    @Test("P4 P9 P15 read, write, delete, move and prepare each message another process's presenter once")
    func eachAccessOnce() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let remote = try presenter(of: url.path)
        let coordinator = FileCoordinator()

        try coordinator.coordinate(readingItemAt: url) { url in _ = try Data(contentsOf: url) }
        #expect(events(remote) == ["RELINQUISH_READER", "SAVE", "REACQUIRE"], "read")

        // A write whose accessor saves atomically through the mount: one relinquish, one change.
        try coordinator.coordinate(writingItemAt: url, options: .forMerging) { url in
            try Data("merged\n".utf8).write(to: url, options: .atomic)
        }
        #expect(events(remote) == ["RELINQUISH_WRITER", "SAVE", "CHANGED", "REACQUIRE"], "write")

        try coordinator.prepare(forReadingItemsAt: [], writingItemsAt: [url]) { done in
            #expect(throws: Never.self) {
                try coordinator.coordinate(writingItemAt: url) { url in try Data("batch\n".utf8).write(to: url) }
            }
            done()
        }
        #expect(events(remote) == ["RELINQUISH_WRITER", "CHANGED", "REACQUIRE"], "prepare")

        let moved = URL(fileURLWithPath: fx.path("moved.txt"))
        try coordinator.coordinate(
            writingItemAt: url, options: .forMoving, writingItemAt: moved, options: .forReplacing
        ) { from, to in
            try FileManager.default.moveItem(at: from, to: to)
            coordinator.item(at: from, didMoveTo: to)
        }
        #expect(events(remote) == ["RELINQUISH_WRITER", "MOVED_FROM", "MOVED_TO", "REACQUIRE"], "move")

        try coordinator.coordinate(writingItemAt: moved, options: .forDeleting) { url in
            try FileManager.default.removeItem(at: url)
        }
        #expect(
            events(remote) == ["RELINQUISH_WRITER", "ACCOMMODATE_DELETION", "PRESENTER_REMOVED", "REACQUIRE"], "delete")
    }

    @Test("P4 a Swift presenter's reacquirer runs after an unmodified rm of its item")
    func reacquireAfterAnUnmodifiedRm() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let log = EventLog()
        let presenter = LoggingPresenter("P", fx.path("doc.txt"), log: log)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }
        #expect(try run("/bin/rm", [fx.path("doc.txt")]).status == 0)
        #expect(eventually { log.events.contains("P:reacquire") }, "\(log.events)")
        #expect(log.events.filter { $0 == "P:relinquishToWriter" }.count == 1, "\(log.events)")
        #expect(log.events.filter { $0 == "P:accommodateDeletion" }.count == 1, "\(log.events)")
    }
}
