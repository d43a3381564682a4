import CoordinationClient
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Apple's file versions (`NSFileVersion`) and the presenter's version callbacks, from a Swift
/// program: inside a mount through the mount's store (this test process is a client of the
/// mount's daemon, as any program is), outside any mount through the daemon's.
@Suite(.serialized) struct FileVersionTests {
    /// Two hold.py processes read `doc`; A rewrites it, then B rewrites it from its older read:
    /// a lost update, whose conflict version holds A's content.
    func loseAnUpdate(_ doc: String) throws {
        let a = try Child.holder(), b = try Child.holder()
        for reader in [a, b] {
            #expect(reader.ask("open r \(doc)") == "ok 1")
            #expect(reader.ask("read 1") == "data base|")
            #expect(reader.ask("close all") == "ok")
        }
        for (writer, text) in [(a, "from A"), (b, "from B")] {
            #expect(writer.ask("open wt \(doc)") == "ok 2")
            #expect(writer.ask("write 2 \(text)") == "ok")
            #expect(writer.ask("close all") == "ok")
        }
    }

    func content(_ version: FileVersion) -> String? { try? String(contentsOf: version.url, encoding: .utf8) }

    @Test("P18 a lost update reaches presentedItemDidGain as a conflict version; resolving and removing it are heard")
    func p18ConflictGainedResolvedAndLost() throws {
        // The holders are processes of this test's session: told apart by process.
        let fx = try MountFixture(["--version-readers", "process"])
        try fx.seed("doc.json", "base\n")
        let doc = fx.path("doc.json"), url = URL(fileURLWithPath: doc)
        let log = EventLog()
        let editor = VersionsPresenter(url: url, log: log)
        let folder = VersionsPresenter(url: fx.mountPoint, log: log, name: "folder")
        FileCoordinator.addFilePresenter(editor)
        FileCoordinator.addFilePresenter(folder)
        defer { FileCoordinator.removeFilePresenter(editor); FileCoordinator.removeFilePresenter(folder) }
        try loseAnUpdate(doc)
        #expect(
            eventually {
                log.events.contains { $0.hasPrefix("gain ") } && log.events.contains { $0.hasPrefix("folder:gain ") }
            },
            "\(log.events)")
        let gained = try #require(editor.versions.first)
        #expect(gained.isConflict && !gained.isResolved)
        #expect(content(gained) == "from A\n", "the conflict keeps the update that would have been lost")
        #expect(
            log.events.filter { $0.hasPrefix("gain ") } == ["gain \(gained.persistentIdentifier) conflict"],
            "told once: \(log.events)")
        #expect(log.events.contains("folder:gain \(gained.persistentIdentifier) conflict at doc.json"), "\(log.events)")

        let conflicts = try #require(NSFileVersion.unresolvedConflictVersionsOfItem(at: url))
        #expect(conflicts.map(\.persistentIdentifier) == [gained.persistentIdentifier])
        #expect(NSFileVersion.currentVersionOfItem(at: url).map(content) == "from B\n")
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.contains(gained) == true)

        conflicts[0].isResolved = true
        #expect(conflicts[0].isResolved)
        #expect(eventually { log.events.contains("resolve \(gained.persistentIdentifier) conflict") }, "\(log.events)")
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: url)?.isEmpty == true)
        #expect(
            FileVersion.version(itemAt: url, forPersistentIdentifier: gained.persistentIdentifier)?.isResolved == true)

        try conflicts[0].remove()
        #expect(eventually { log.events.contains("lose \(gained.persistentIdentifier)") }, "\(log.events)")
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.contains(gained) == false)
        #expect(throws: CocoaError.self) { try NSFileVersion.currentVersionOfItem(at: url)!.remove() }
    }

    @Test("P18 a presenter in the mount's own process hears a lost update as a conflict version")
    func p18InTheMountsOwnProcess() throws {
        let fx = try MountFixture(inProcess: { $0.versions.readers = .process })
        let domain = try #require(fx.domain)
        try fx.seed("doc.json", "base\n")
        let doc = fx.path("doc.json")
        let log = EventLog()
        let editor = VersionsPresenter(url: URL(fileURLWithPath: doc), log: log)
        domain.addFilePresenter(editor)
        defer { domain.removeFilePresenter(editor) }
        try loseAnUpdate(doc)
        #expect(eventually { !editor.versions.isEmpty }, "\(log.events)")
        let gained = try #require(editor.versions.first)
        #expect(gained.isConflict && content(gained) == "from A\n", "\(gained)")
        #expect(log.events == ["gain \(gained.persistentIdentifier) conflict"])
    }

    @Test("P18 versions added, listed, found by identifier, put back and removed inside a mount")
    func versionsInsideAMount() throws {
        let fx = try MountFixture()
        try fx.seed("notes.txt", "one\n")
        let url = URL(fileURLWithPath: fx.path("notes.txt"))
        try Data("two\n".utf8).write(to: url)  // a rewrite: "one" is kept
        let log = EventLog()
        let editor = VersionsPresenter(url: url, log: log)
        FileCoordinator.addFilePresenter(editor)
        defer { FileCoordinator.removeFilePresenter(editor) }

        let current = try #require(NSFileVersion.currentVersionOfItem(at: url))
        #expect(
            current.url.path == url.path && !current.isConflict && current.isResolved && current.modificationDate != nil
        )
        let kept = try #require(NSFileVersion.otherVersionsOfItem(at: url))
        #expect(kept.map(content) == ["one\n"])
        #expect(kept[0].localizedName == "notes.txt" && kept[0].isDiscardable)

        let draft = URL(fileURLWithPath: fx.base.appendingPathComponent("draft").path)
        try Data("a draft\n".utf8).write(to: draft)
        let added = try NSFileVersion.addOfItem(at: url, withContentsOf: draft, options: .byMoving)
        #expect(!FileManager.default.fileExists(atPath: draft.path), "byMoving takes the contents file")
        #expect(content(added) == "a draft\n" && !added.isConflict)
        #expect(eventually { log.events.contains("gain \(added.persistentIdentifier)") }, "\(log.events)")
        let found = try #require(FileVersion.version(itemAt: url, forPersistentIdentifier: added.persistentIdentifier))
        #expect(found == added && content(found) == "a draft\n")

        added.isDiscardable = false
        #expect(
            FileVersion.version(itemAt: url, forPersistentIdentifier: added.persistentIdentifier)?.isDiscardable
                == false)

        #expect(try added.replaceItem(at: url) == url)
        #expect(try String(contentsOf: url, encoding: .utf8) == "a draft\n")
        // Put back as a save, the content it replaced is kept in turn.
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.compactMap(content).contains("two\n") == true)

        try NSFileVersion.removeOtherVersionsOfItem(at: url)
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.isEmpty == true)
        #expect(eventually { log.events.contains("lose \(added.persistentIdentifier)") }, "\(log.events)")
        #expect(
            NSFileVersion.otherVersionsOfItem(at: URL(fileURLWithPath: fx.path("never-there"))) == [],
            "a path never versioned has none")
    }

    @Test("P18 outside any mount the daemon keeps added versions, across its restart, and its presenters hear of them")
    func versionsOutsideAnyMountThroughTheDaemon() throws {
        let (directory, socket) = try CrossProcessTests.daemonDirectory()
        defer { CrossProcessTests.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        chmod(directory, 0o755)
        let store = directory + "/versions"
        var daemons: [Child] = []
        func startDaemon() throws {
            daemons.append(
                try Child(
                    Paths.binary.path, ["daemon", "--socket", socket, "--allow-others", "--versions-directory", store]))
            #expect(eventually { (try? ControlClient(socketPath: socket)) != nil }, "the daemon serves \(socket)")
        }
        try startDaemon()
        setenv("COORDFS_SOCKET", socket, 1)
        defer { unsetenv("COORDFS_SOCKET") }
        let file = directory + "/report.txt", url = URL(fileURLWithPath: file)
        try Data("final\n".utf8).write(to: url)
        chmod(file, 0o644)
        func watch() throws -> Child {
            let watch = try Child(
                "/bin/sh",
                ["-c", "COORDFS_SOCKET=\"$1\" exec \"$2\" watch \"$3\" 2>&1", "sh", socket, Paths.binary.path, file])
            #expect(watch.next() == "Watches established.")
            return watch
        }
        let watcher = try watch()

        let draft = directory + "/draft"
        try Data("draft\n".utf8).write(to: URL(fileURLWithPath: draft))
        chmod(draft, 0o644)
        let added = try NSFileVersion.addOfItem(at: url, withContentsOf: URL(fileURLWithPath: draft))
        #expect(FileManager.default.fileExists(atPath: draft), "without byMoving the contents file stays")
        #expect(watcher.next()?.contains("VERSION_ADDED cookie=\(added.persistentIdentifier)") == true)
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.map(content) == ["draft\n"])

        // Another user who may read the file sees that version, not one whose content they could
        // not read.
        let secret = directory + "/secret"
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: secret))
        chmod(secret, 0o600)
        let hidden = try NSFileVersion.addOfItem(at: url, withContentsOf: URL(fileURLWithPath: secret))
        let listed = try run(
            Nobody.program, Nobody.arguments([Paths.binary.path, "versions", file, "--socket", socket, "--json"]))
        #expect(listed.status == 0 && listed.output.contains(added.persistentIdentifier), "\(listed)")
        #expect(!listed.output.contains(hidden.persistentIdentifier), "\(listed)")

        // The store survives its daemon.
        CrossProcessTests.stopDaemon(at: socket)
        try startDaemon()
        let again = try #require(FileVersion.version(itemAt: url, forPersistentIdentifier: added.persistentIdentifier))
        #expect(content(again) == "draft\n")
        let watcherAgain = try watch()
        try again.remove()
        #expect(watcherAgain.next()?.contains("VERSION_REMOVED cookie=\(added.persistentIdentifier)") == true)
        #expect(
            NSFileVersion.otherVersionsOfItem(at: url)?.map(\.persistentIdentifier) == [hidden.persistentIdentifier])
    }
}

/// A presenter that keeps the versions it hears of, and logs each callback.
final class VersionsPresenter: NSObject, FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    let log: EventLog
    let name: String?
    private let lock = NSLock()
    private var heard: [FileVersion] = []

    init(url: URL, log: EventLog, name: String? = nil) {
        presentedItemURL = url
        self.log = log
        self.name = name
    }

    var versions: [FileVersion] { lock.withLock { heard } }

    private func note(_ event: String, _ version: FileVersion, at url: URL? = nil) {
        lock.withLock { heard.append(version) }
        let place = url.map { " at \($0.lastPathComponent)" } ?? ""
        log.add(
            (name.map { $0 + ":" } ?? "") + event + " " + version.persistentIdentifier
                + (version.isConflict ? " conflict" : "") + place)
    }

    func presentedItemDidGain(_ version: FileVersion) { note("gain", version) }
    func presentedItemDidLose(_ version: FileVersion) { note("lose", version) }
    func presentedItemDidResolveConflict(_ version: FileVersion) { note("resolve", version) }
    func presentedSubitem(at url: URL, didGain version: FileVersion) { note("gain", version, at: url) }
    func presentedSubitem(at url: URL, didLose version: FileVersion) { note("lose", version, at: url) }
    func presentedSubitem(at url: URL, didResolve version: FileVersion) { note("resolve", version, at: url) }
}
