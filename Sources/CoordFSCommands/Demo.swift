import ArgumentParser
import Coordination
import CoordinationRuntime
import Dispatch
import FileCoordination
import Foundation

/// `coordfs demo`: coordination at work inside one process, narrated.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Show coordination at work in this process: a writer, a waiting reader, a presenter, a move, a deletion.",
        discussion: """
            Exit status: 0; 1 when --directory is not there or the demo's files cannot be made, with \
            the reason on standard error; 64 for a command line it cannot take.
            """
    )

    @Option(help: "A directory to work in (default: a new temporary directory, removed afterwards).")
    var directory: String?

    func run() throws {
        let fileManager = FileManager.default
        let base: URL
        if let directory {
            base = URL(fileURLWithPath: directory)
            guard fileManager.fileExists(atPath: base.path) else {
                throw CommandFailure("no such directory: \(directory)")
            }
        } else {
            base = fileManager.temporaryDirectory.appendingPathComponent("coordfs-demo-\(getpid())")
            try fileManager.createDirectory(at: base, withIntermediateDirectories: true)
        }
        defer { if directory == nil { try? fileManager.removeItem(at: base) } }

        let narrator = Narrator()
        let notes = base.appendingPathComponent("notes.txt")
        try Data("draft\n".utf8).write(to: notes)
        let editor = NarratingPresenter(url: notes, narrator: narrator)
        FileCoordinator.addFilePresenter(editor)
        defer { FileCoordinator.removeFilePresenter(editor) }

        narrator.say("main", "an editor presents \(notes.lastPathComponent) and has unsaved changes")
        let writerHolds = DispatchSemaphore(value: 0), writerMayEnd = DispatchSemaphore(value: 0)
        let writer = Thread {
            try? FileCoordinator().coordinate(writingItemAt: notes) { url in
                narrator.say("writer", "granted a write; holding it for a moment")
                writerHolds.signal()
                writerMayEnd.wait()
                try? Data("draft\nwritten by the writer\n".utf8).write(to: url)
                narrator.say("writer", "done; releasing")
            }
        }
        writer.start()
        writerHolds.wait()
        let reader = Thread {
            narrator.say("reader", "asks to read; must wait for the writer")
            let text = try? FileCoordinator().coordinate(readingItemAt: notes) {
                try String(contentsOf: $0, encoding: .utf8)
            }
            narrator.say(
                "reader",
                "read \(text?.split(separator: "\n").count ?? 0) lines: \(text?.replacingOccurrences(of: "\n", with: " | ") ?? "-")"
            )
        }
        reader.start()
        usleep(300_000)
        narrator.say(
            "main",
            "while the reader waits, as `coordfs status` shows programs in a mount:\n"
                + Self.table(CoordinationDomain.shared))
        writerMayEnd.signal()
        while !reader.isFinished { usleep(10_000) }

        let renamed = base.appendingPathComponent("notes-final.txt")
        let mover = FileCoordinator()
        try mover.coordinate(writingItemAt: notes, options: .forMoving, writingItemAt: renamed, options: .forReplacing)
        { source, target in
            narrator.say("mover", "renames \(source.lastPathComponent) to \(target.lastPathComponent)")
            try fileManager.moveItem(at: source, to: target)
            mover.item(at: source, didMoveTo: target)
        }
        usleep(100_000)
        try FileCoordinator().coordinate(writingItemAt: renamed, options: .forDeleting) { url in
            narrator.say("deleter", "deletes \(url.lastPathComponent)")
            try fileManager.removeItem(at: url)
        }
        usleep(100_000)
        narrator.say(
            "main",
            "done. Through a coordfs mount (`coordfs mount BACKING MOUNTPOINT`), programs that know nothing "
                + "of coordination (cat, cp, mv, editors) are held and asked the same way; `coordfs help` lists the commands."
        )
    }

    /// Who holds and who waits in `domain`, as rows of `coordfs status`'s table (TYPE, MODE,
    /// PATH), indented under the narration: what a user sees, not the engine's own records.
    static func table(_ domain: CoordinationDomain) -> String {
        let snapshot = domain.engine.snapshot()
        let rows =
            [["TYPE", "MODE", "PATH"]]
            + snapshot.holders.flatMap { holder in
                holder.intents.map { ["HOLD", $0.kind.isWrite ? "write" : "read", String($0.path.lastComponent)] }
            }
            + snapshot.waiters.flatMap { waiter in
                waiter.intents.map { ["WAIT", $0.kind.isWrite ? "write" : "read", String($0.path.lastComponent)] }
            }
        let widths = (0..<3).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            "              "
                + row.enumerated().map { $0.element.padding(toLength: widths[$0.offset], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }.joined(separator: "\n")
    }
}

// @unchecked Sendable: its counter is behind its lock.
/// Prints numbered lines, one speaker a line, from any thread.
final class Narrator: @unchecked Sendable {
    private let lock = NSLock()
    private var step = 0
    func say(_ who: String, _ what: String) {
        lock.lock()
        step += 1
        let label = who.padding(toLength: 8, withPad: " ", startingAt: 0)
        print("\(step < 10 ? " " : "")\(step)  \(label) \(what)")
        lock.unlock()
    }
}

// @unchecked Sendable: its URL is behind its lock; its messages run on its queue.
/// An editor that saves when asked and follows its document around.
final class NarratingPresenter: FilePresenter, @unchecked Sendable {
    private let lock = NSLock()
    private var url: URL?
    let narrator: Narrator
    let presentedItemOperationQueue = OperationQueue()

    init(url: URL, narrator: Narrator) {
        self.url = url
        self.narrator = narrator
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    var presentedItemURL: URL? { lock.lock(); defer { lock.unlock() }; return url }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        narrator.say("editor", "asked to relinquish to a reader")
        reader { [narrator] in narrator.say("editor", "reacquires after the read") }
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        narrator.say("editor", "asked to relinquish to a writer")
        writer(nil)
    }
    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        narrator.say("editor", "asked to save; saves its changes")
        completionHandler(nil)
    }
    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        narrator.say("editor", "asked to accommodate the deletion; closes the document")
        completionHandler(nil)
    }
    func presentedItemDidMove(to newURL: URL) {
        narrator.say("editor", "told its document moved to \(newURL.lastPathComponent)")
        lock.lock(); url = newURL; lock.unlock()
    }
    func presentedItemDidChange() { narrator.say("editor", "told its document changed") }
}
