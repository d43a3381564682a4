import FileCoordination
import Foundation
import Testing

/// Code written for Apple platforms (`Notebook.swift`) compiles unchanged but for the import,
/// and behaves as it would there.
@Suite(.serialized) final class AppleStyleTests {
    let folder: URL

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("apple-style-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    // Each test has a suite of its own: its folder goes with it, whatever the test did.
    deinit { try? FileManager.default.removeItem(at: folder) }

    func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline { if condition() { return true }; usleep(10_000) }
        return condition()
    }

    /// Apple's conflict settling compiles as written; outside a mount with no daemon (this test
    /// coordinates in process) nobody keeps versions, so there is nothing to settle.
    @Test func settlingConflictsWhereNoVersionsAreKeptSettlesNothing() throws {
        let url = folder.appendingPathComponent("notes.txt")
        #expect(NotebookStore.write("only\n", to: url) == nil)
        #expect(NSFileVersion.currentVersionOfItem(at: url) != nil)
        #expect(NSFileVersion.otherVersionsOfItem(at: url) == [])
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: url) == [])
        #expect(NotebookStore.resolveConflicts(url) == nil)
        #expect(NSFileVersion.currentVersionOfItem(at: folder.appendingPathComponent("absent")) == nil)
        #expect(NSFileVersion.otherVersionsOfItem(at: folder.appendingPathComponent("absent")) == nil)
    }

    @Test func aPresenterHearsWritesAndFollowsAMove() throws {
        let url = folder.appendingPathComponent("notes.txt")
        #expect(NotebookStore.write("first\n", to: url) == nil)
        let notebook = Notebook(url: url)
        defer { notebook.close() }
        #expect(NotebookStore.write("second\n", to: url) == nil)
        var error: NSError?
        #expect(NotebookStore.read(url, error: &error) == "second\n" && error == nil)
        let moved = folder.appendingPathComponent("renamed.txt")
        #expect(NotebookStore.move(url, to: moved) == nil)
        #expect(eventually { notebook.events.contains("did move to renamed.txt") }, "\(notebook.events)")
        #expect(notebook.presentedItemURL?.lastPathComponent == "renamed.txt")
        #expect(notebook.events.starts(with: ["relinquish to writer"]), "\(notebook.events)")
        #expect(
            notebook.events.contains("save") && notebook.events.contains("did change")
                && notebook.events.contains("reacquire"),
            "\(notebook.events)")
        #expect(NotebookStore.copy(moved, to: folder.appendingPathComponent("copy.txt")) == nil)
        #expect(try String(contentsOf: folder.appendingPathComponent("copy.txt"), encoding: .utf8) == "second\n")
        let prepared = NotebookStore.prepareBoth(moved, folder.appendingPathComponent("copy.txt"))
        #expect(prepared.ran && prepared.error == nil)
    }

    /// A coordination that cannot be made leaves the accessor uncalled and says why in
    /// `NSCocoaErrorDomain`, as on Apple platforms.
    @Test func aFailedCoordinationFillsTheErrorAndRunsNoAccessor() throws {
        var error: NSError?
        let text = NotebookStore.read(URL(string: "https://example.com/notes.txt")!, error: &error)
        #expect(text == nil)
        #expect(
            error?.domain == NSCocoaErrorDomain && error?.code == CocoaError.Code.fileReadUnsupportedScheme.rawValue,
            "\(String(describing: error))")
        #expect(
            error?.localizedDescription.contains("URL") == true, "\(String(describing: error?.localizedDescription))")
        // A move reported outside a coordinated write is no crash, and moves nothing.
        NSFileCoordinator(filePresenter: nil).item(
            at: folder.appendingPathComponent("a"), didMoveTo: folder.appendingPathComponent("b"))
        // Nil for the error pointer is allowed, as in Foundation.
        NSFileCoordinator(filePresenter: nil).coordinate(
            readingItemAt: URL(string: "https://example.com")!, options: [],
            error: nil
        ) { _ in Issue.record("the accessor ran") }
    }
}
