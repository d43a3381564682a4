import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A Swift program (this test process, with the shared domain) and unmodified programs in other
/// processes coordinate through a mount's control socket, transparently.
@Suite struct SwiftThroughMount {
    @Test func aSwiftWriteHoldsOffOtherProcessesButNotItsOwnOpens() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "v1\n")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let other = try Child.holder()
        try FileCoordinator().coordinate(writingItemAt: url) { url in
            #expect(other.ask("open rn \(url.path)") == "err EAGAIN", "another process is held off")
            // This process's own open through the mount does not wait on its own intent.
            try Data("v2\n".utf8).write(to: url)
        }
        #expect(other.ask("open rn \(url.path)") == "ok 1", "released when the accessor returned")
        #expect(other.ask("read 1") == "data v2|")
    }

    @Test func aSwiftReadWaitsForAnotherProcessesWriter() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let writer = try Child.holder()
        #expect(writer.ask("open w \(url.path)") == "ok 1")
        let impatient = FileCoordinator()
        impatient.waitTimeout = .milliseconds(300)
        #expect(throws: FileCoordinationError.timedOut(item: url.path)) {
            try impatient.coordinate(readingItemAt: url) { _ in }
        }
        let reader = Background {
            try FileCoordinator().coordinate(readingItemAt: url) { try String(contentsOf: $0, encoding: .utf8) }
        }
        usleep(100_000)
        #expect(writer.ask("write 1 written") == "ok")
        #expect(writer.ask("close 1") == "ok")
        #expect(try reader.join() == "seed\nwritten\n", "granted after the writer closed, and sees its bytes")
    }

    @Test func aSwiftPresenterSavesBeforeAnotherProcessReads() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "unsaved\n")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let editor = SavingEditor(url: url, contents: "saved by the Swift editor\n")
        FileCoordinator.addFilePresenter(editor)
        defer { FileCoordinator.removeFilePresenter(editor) }
        let cat = try run("/bin/cat", [url.path])
        #expect(cat.output == "saved by the Swift editor\n")
        #expect(editor.log.events.starts(with: ["relinquishToReader", "save"]), "\(editor.log.events)")
        #expect(eventually { editor.log.events.contains("reacquire") })
        // Another process renames it: the editor follows.
        #expect(try run("/bin/mv", [url.path, fx.path("renamed.txt")]).status == 0)
        #expect(eventually { editor.presentedItemURL?.path == fx.path("renamed.txt") })
        // docs/swift.md: each callback knew who made the access.
        #expect(
            editor.origin(of: "relinquishToReader")?.via == .mount
                && editor.origin(of: "relinquishToReader")?.command == "cat",
            "\(String(describing: editor.origin(of: "relinquishToReader")))")
        #expect(
            editor.origin(of: "didMove")?.command == "mv" && editor.origin(of: "didMove")?.uid == geteuid(),
            "\(String(describing: editor.origin(of: "didMove")))")
    }
}

/// P15 across processes: the same access messages a presenter in another process exactly as
/// one in the coordinator's own process.
@Suite struct PresentersInOtherProcesses {
    @Test("P15 presenters in other processes are messaged exactly as those in the coordinator's process") func p15()
        throws
    {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let log = EventLog()
        let local = LoggingPresenter("L", url.path, log: log)  // answers without writing anything
        FileCoordinator.addFilePresenter(local)
        defer { FileCoordinator.removeFilePresenter(local) }
        let remote = try Child(
            "/usr/bin/python3", [Paths.scripts.appendingPathComponent("presenter.py").path, url.path])
        #expect(remote.next()?.contains("\"ok\": true") == true && remote.next()?.contains("\"wd\"") == true)
        func remoteEvents() -> [String] {
            var names: [String] = []
            while let line = remote.next(timeout: .milliseconds(500)),
                let record = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            {
                names.append(((record["events"] as? [String]) ?? []).filter { $0 != "REQUEST" }.joined(separator: ","))
            }
            return names
        }
        // A read by this process's own coordinator: both presenters, the same messages.
        try FileCoordinator().coordinate(readingItemAt: url) { _ in }
        #expect(eventually { log.events.count == 3 })
        #expect(log.events == ["L:relinquishToReader", "L:save", "L:reacquire"])
        #expect(remoteEvents() == ["RELINQUISH_READER", "SAVE", "REACQUIRE"])
    }
}

// @unchecked Sendable: its URL and origins are behind `lock`.
/// Saves its contents when asked, follows moves, logs what it was asked.
final class SavingEditor: FilePresenter, @unchecked Sendable {
    let log = EventLog()
    let contents: String
    private let lock = NSLock()
    private var url: URL
    /// The origin of each message, by message (`AccessOrigin.current`).
    private var origins: [String: AccessOrigin] = [:]

    func origin(of message: String) -> AccessOrigin? { lock.lock(); defer { lock.unlock() }; return origins[message] }

    private func note(_ message: String) {
        lock.lock(); origins[message] = AccessOrigin.current; lock.unlock()
        log.add(message)
    }
    let presentedItemOperationQueue = OperationQueue()

    init(url: URL, contents: String) {
        self.url = url
        self.contents = contents
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    var presentedItemURL: URL? { lock.lock(); defer { lock.unlock() }; return url }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("relinquishToReader")
        reader { [log] in log.add("reacquire") }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        log.add("save")
        // Saving through its own coordinator is granted while the reader waits (C21).
        let target = presentedItemURL!
        do {
            try FileCoordinator(filePresenter: self).coordinate(writingItemAt: target) {
                try Data(contents.utf8).write(to: $0)
            }
            completionHandler(nil)
        } catch {
            completionHandler(error)
        }
    }

    func presentedItemDidMove(to newURL: URL) {
        note("didMove")
        lock.lock(); url = newURL; lock.unlock()
    }
}

/// The same accesses reach a presenter written in Python with the package and a Swift
/// `FilePresenter` alike: the same messages, in the same order (issue: presenters in any language).
@Suite struct PresentersInAnyLanguage {
    @Test func aPythonPresenterAndASwiftPresenterHearTheSameMessages() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let url = URL(fileURLWithPath: fx.path("doc.txt"))
        let log = EventLog()
        let swift = LoggingPresenter("S", url.path, log: log)
        FileCoordinator.addFilePresenter(swift)
        defer { FileCoordinator.removeFilePresenter(swift) }
        let python = try Child(
            "/usr/bin/env",
            [
                "PYTHONPATH=" + Paths.repository.appendingPathComponent("clients/python").path,
                "python3", Paths.scripts.appendingPathComponent("package_presenter.py").path, url.path
            ])
        #expect(python.next() == "watching")
        // Another program reads, appends, then renames the file, through the mount.
        #expect(try run("/bin/cat", [url.path]).status == 0)
        #expect(eventually { log.events.count >= 3 })
        #expect(try run("/bin/sh", ["-c", "echo more >> \"$0\"", url.path]).status == 0)
        #expect(eventually { log.events.count >= 6 })
        #expect(try run("/bin/mv", [url.path, fx.path("renamed.txt")]).status == 0)
        #expect(eventually { log.events.count >= 9 })
        var heard: [String] = []
        while let line = python.next(timeout: .milliseconds(500)) { heard.append(line) }
        // The Swift presenter's callbacks, in the protocol's names; a move is MOVED_FROM and MOVED_TO there.
        let names = [
            "relinquishToReader": "RELINQUISH_READER", "relinquishToWriter": "RELINQUISH_WRITER", "save": "SAVE",
            "reacquire": "REACQUIRE", "didChange": "CHANGED", "accommodateDeletion": "ACCOMMODATE_DELETION"
        ]
        let swiftHeard = log.events.flatMap { event -> [String] in
            let callback = event.dropFirst(2)
            if callback.hasPrefix("didMove") { return ["MOVED_FROM", "MOVED_TO"] }
            return [names[String(callback)] ?? String(callback)]
        }
        #expect(heard == swiftHeard, "Python: \(heard), Swift: \(swiftHeard)")
        #expect(heard.first == "RELINQUISH_READER" && heard.contains("CHANGED") && heard.last == "MOVED_TO", "\(heard)")
    }
}
