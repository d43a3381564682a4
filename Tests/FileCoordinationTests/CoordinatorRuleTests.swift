import Coordination
import Dispatch
import FileCoordination
import Foundation
import TestSupport
import Testing

/// The C rules of docs/rules.md: the coordinator.
@Suite struct CoordinatorRules {
    @Test("C1 read waits for writer") func c1() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let writer = fx.holdWrite("W", a)
        #expect(writer.started(fx))
        let reader = fx.read("R", a)
        #expect(fx.waitForWaiters(1))
        #expect(!fx.log.contains("R-run"))
        try writer.release()
        try reader.join()
        #expect(fx.log.order("W-end", before: "R-run"))
        #expect(fx.isIdle)
    }

    @Test("C2 write waits for reader and for writer") func c2() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let reader = fx.holdRead("R", a)
        #expect(reader.started(fx))
        let writer = fx.write("W", a)
        #expect(fx.waitForWaiters(1))
        try reader.release()
        try writer.join()
        #expect(fx.log.order("R-end", before: "W-run"))

        let first = fx.holdWrite("W1", a)
        #expect(first.started(fx))
        let second = fx.write("W2", a)
        #expect(fx.waitForWaiters(1))
        try first.release()
        try second.join()
        #expect(fx.log.order("W1-end", before: "W2-run"))
    }

    @Test("C3 readers of one item proceed together") func c3() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let first = fx.holdRead("R1", a)
        #expect(first.started(fx))
        // The second read completes while the first still holds: no waiting.
        try fx.read("R2", a).join()
        #expect(fx.log.contains("R2-run") && !fx.log.contains("R1-end"), "R2 ran while R1 still held")
        #expect(fx.engine.snapshot().waiters.isEmpty)
        try first.release()
    }

    @Test("C4 one coordinator, or one purpose identifier, never blocks itself") func c4() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let shared = fx.coordinator()
        shared.purposeIdentifier = "org.example.sync"
        let twin = fx.coordinator()
        twin.purposeIdentifier = "org.example.sync"
        let holder = fx.holdWrite("W", a, coordinator: shared)
        #expect(holder.started(fx))
        // Same purpose: granted at once although a write is held.
        try fx.write("twin", a, coordinator: twin).join()
        #expect(fx.log.contains("twin-run") && !fx.log.contains("W-end"), "the twin wrote while W still held")
        // A different purpose must wait.
        let other = fx.write("other", a)
        #expect(fx.waitForWaiters(1))
        try holder.release()
        try other.join()
        #expect(fx.log.order("W-end", before: "other-run"))
    }

    @Test("C5 the accessor runs only when every intent is granted; the access ends when it returns") func c5() throws {
        let fx = try Fixture()
        let a = try fx.file("a"), b = try fx.file("b")
        let holder = fx.holdWrite("W", b)
        #expect(holder.started(fx))
        let log = fx.log
        let both = Background {
            try fx.coordinator().coordinate(readingItemAt: a, writingItemAt: b) { _, _ in log.add("both-run") }
        }
        #expect(fx.waitForWaiters(1))
        #expect(!log.contains("both-run"))
        try holder.release()
        try both.join()
        #expect(log.order("W-end", before: "both-run"))
        #expect(fx.isIdle, "the access ended when the accessor returned")
    }

    @Test("C6 several intents are taken all together or not at all") func c6() throws {
        let fx = try Fixture()
        let x = try fx.file("x"), y = try fx.file("y")
        let holder = fx.holdWrite("W", x)
        #expect(holder.started(fx))
        let log = fx.log
        let pair = Background {
            try fx.coordinator().coordinate(writingItemAt: y, writingItemAt: x) { _, _ in log.add("pair-run") }
        }
        #expect(fx.waitForWaiters(1))
        // The waiting pair holds nothing: only the writer of x holds. (A later writer of y would
        // still queue behind the pair: requests are granted in arrival order, X3.)
        let snapshot = fx.engine.snapshot()
        #expect(snapshot.holders.count == 1)
        #expect(snapshot.holders.first?.intents.map(\.path.string) == [x.path])
        #expect(snapshot.waiters.first?.intents.count == 2)
        try holder.release()
        try pair.join()

        // Opposite orders, many times, never deadlock.
        let c1 = fx.coordinator(), c2 = fx.coordinator()
        let left = Background { for _ in 0..<200 { try c1.coordinate(writingItemAt: x, writingItemAt: y) { _, _ in } } }
        let right = Background {
            for _ in 0..<200 { try c2.coordinate(writingItemAt: y, writingItemAt: x) { _, _ in } }
        }
        try left.join()
        try right.join()
        #expect(fx.isIdle)
    }

    @Test("C7 read one item and write another as one coordination, with both URLs") func c7() throws {
        let fx = try Fixture()
        let source = try fx.file("source", "data"), target = fx.url("target")
        let urls = try fx.coordinator().coordinate(readingItemAt: source, writingItemAt: target) { r, w -> (URL, URL) in
            let snapshot = fx.engine.snapshot()
            #expect(snapshot.holders.count == 1)
            #expect(snapshot.holders[0].intents.count == 2)
            try FileManager.default.copyItem(at: r, to: w)
            return (r, w)
        }
        #expect(urls.0 == source && urls.1 == target)
        #expect(try String(contentsOf: target, encoding: .utf8) == "data")
    }

    @Test("C8 write two items as one coordination, with both URLs") func c8() throws {
        let fx = try Fixture()
        let source = try fx.file("old"), target = fx.url("new")
        let holder = fx.holdRead("R", target)
        #expect(holder.started(fx))
        let coordinator = fx.coordinator()
        let log = fx.log
        let move = Background {
            try coordinator.coordinate(
                writingItemAt: source, options: .forMoving, writingItemAt: target, options: .forReplacing
            ) { s, t in
                try FileManager.default.moveItem(at: s, to: t)
                coordinator.item(at: s, didMoveTo: t)
                log.add("move-run")
            }
        }
        #expect(fx.waitForWaiters(1))
        try holder.release()
        try move.join()
        #expect(log.order("R-end", before: "move-run"))
        #expect(FileManager.default.fileExists(atPath: target.path))
    }

    @Test("C9 a prepared batch asks presenters once; nested calls do not wait; reacquirers run at its end") func c9()
        throws
    {
        let fx = try Fixture()
        let dir = try fx.directory("docs")
        let inner = try fx.file("docs/a.txt")
        let presenter = fx.presenter("P", "docs/a.txt")
        presenter.givesReacquirer = true
        let coordinator = fx.coordinator()
        let finish = Gate()
        var complete: (@Sendable () -> Void)?
        try coordinator.prepare(forReadingItemsAt: [dir], writingItemsAt: []) { completion in
            // Nested calls on the batch's items: granted at once, no new relinquish.
            try? coordinator.coordinate(readingItemAt: inner, options: .withoutChanges) { _ in fx.log.add("nested-read")
            }
            try? coordinator.coordinate(writingItemAt: inner) { _ in fx.log.add("nested-write") }
            complete = completion
        }
        #expect(fx.log.contains("nested-read") && fx.log.contains("nested-write"))
        #expect(fx.log.count("P:relinquishToReader") == 1, "asked once, by the batch (\(fx.log.events))")
        #expect(fx.log.count("P:relinquishToWriter") == 0, "nested write did not ask again")
        usleep(50_000)
        #expect(!fx.log.contains("P:reacquire"), "reacquirer waits for the batch's end")
        let completeBatch = complete
        DispatchQueue.global().async {
            completeBatch?(); finish.open()
        }
        finish.wait()
        #expect(fx.log.waitFor("P:reacquire"))
        #expect(fx.isIdle)
    }

    @Test("C10 asynchronous coordination never blocks its caller and runs the accessor on the queue") func c10() throws
    {
        let fx = try Fixture()
        let a = try fx.file("a")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let queue = OperationQueue()
        let done = Gate()
        let log = fx.log
        fx.coordinator().coordinate(with: [.readingIntent(with: a)], queue: queue) { error in
            log.add(error == nil ? "async-run" : "async-error")
            if OperationQueue.current === queue { log.add("on-queue") }
            done.open()
        }
        log.add("returned")
        #expect(fx.waitForWaiters(1))
        try holder.release()
        done.wait()
        #expect(log.order("returned", before: "W-end"))
        #expect(log.order("W-end", before: "async-run"))
        #expect(log.contains("on-queue"))
    }

    @Test("C11 an intent's URL follows a move reported while it waited") func c11() throws {
        let fx = try Fixture()
        let old = try fx.file("dir/old.txt", "v1"), new = fx.url("dir/new.txt")
        let mover = fx.coordinator()
        let gate = Gate()
        let moving = Background {
            try mover.coordinate(writingItemAt: old, options: .forMoving, writingItemAt: new, options: .forReplacing) {
                s, t in
                gate.wait()
                try FileManager.default.moveItem(at: s, to: t)
                mover.item(at: s, didMoveTo: t)
            }
        }
        #expect(eventually { fx.engine.snapshot().holders.count == 1 })
        let intent = FileAccessIntent.readingIntent(with: old)
        let done = Gate()
        let seen = EventLog()
        fx.coordinator().coordinate(with: [intent], queue: OperationQueue()) { error in
            seen.add(error == nil ? intent.url.path : "error \(String(describing: error))")
            done.open()
        }
        #expect(fx.waitForWaiters(1))
        gate.open()
        try moving.join()
        done.wait()
        #expect(seen.events == [new.path])
    }

    @Test("C12 a failed wait holds nothing and skips the accessor") func c12() throws {
        let fx = try Fixture()
        let a = try fx.file("a"), b = try fx.file("b")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let impatient = fx.coordinator()
        impatient.waitTimeout = .milliseconds(100)
        var ran = false
        #expect(throws: FileCoordinationError.timedOut(item: b.path)) {
            try impatient.coordinate(writingItemAt: b, writingItemAt: a) { _, _ in ran = true }
        }
        #expect(!ran)
        let snapshot = fx.engine.snapshot()
        #expect(snapshot.waiters.isEmpty)
        #expect(snapshot.holders.count == 1 && snapshot.holders[0].intents.map(\.path.string) == [a.path])
        try holder.release()
        #expect(fx.isIdle)

        // A presenter's error fails it the same way.
        let presenter = fx.presenter("P", "b")
        presenter.saveError = PresenterRefusal(code: 7)
        #expect(throws: PresenterRefusal(code: 7)) {
            try fx.coordinator().coordinate(readingItemAt: b) { _ in ran = true }
        }
        #expect(!ran)
        #expect(fx.isIdle)
    }

    @Test("C13 cancel() from another thread fails waiting calls; running accessors go on") func c13() throws {
        let fx = try Fixture()
        let a = try fx.file("a"), b = try fx.file("b")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let coordinator = fx.coordinator()
        let log = fx.log
        let running = Gate()
        // One call of this coordinator runs (on b), another waits (on a).
        let runningCall = Background {
            try coordinator.coordinate(readingItemAt: b) { _ in
                log.add("b-start"); running.wait(); log.add("b-end")
            }
        }
        #expect(log.waitFor("b-start"))
        let waitingCall = Background { try coordinator.coordinate(readingItemAt: a) { _ in log.add("a-run") } }
        #expect(fx.waitForWaiters(1))
        DispatchQueue.global().async { coordinator.cancel() }
        #expect(throws: CocoaError(.userCancelled)) { try waitingCall.join() }
        running.open()
        try runningCall.join()
        #expect(log.contains("b-end") && !log.contains("a-run"))
        try holder.release()
        #expect(fx.isIdle)
    }

    @Test("C14 a coordinator made with a presenter never messages it") func c14() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = fx.presenter("P", "a")
        try fx.coordinator(presenter).coordinate(writingItemAt: a, options: .forDeleting) { _ in }
        try fx.coordinator(presenter).coordinate(readingItemAt: a) { _ in }
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }  // someone else: messaged
        #expect(fx.log.waitFor("P:relinquishToReader"))
        usleep(50_000)
        #expect(fx.log.events == ["P:relinquishToReader", "P:save"])
    }

    @Test("C15 a reported move tells the item's presenters, those inside it, and both parents") func c15() throws {
        let fx = try Fixture()
        try fx.file("from/docs/a.txt")
        try fx.directory("to")
        let docs = fx.presenter("docs", "from/docs")
        let inner = fx.presenter("inner", "from/docs/a.txt")
        _ = fx.presenter("from", "from")
        _ = fx.presenter("to", "to")
        let source = fx.url("from/docs"), target = fx.url("to/docs")
        let coordinator = fx.coordinator()
        try coordinator.coordinate(
            writingItemAt: source, options: .forMoving, writingItemAt: target, options: .forReplacing
        ) { s, t in
            try FileManager.default.moveItem(at: s, to: t)
            coordinator.item(at: s, didMoveTo: t)
        }
        #expect(fx.log.waitFor("docs:didMove \(target.path)"))
        #expect(fx.log.waitFor("inner:didMove \(target.path)/a.txt"))
        #expect(fx.log.waitFor("from:subitemDidMove docs docs"))
        #expect(fx.log.waitFor("to:subitemDidMove docs docs"))
        #expect(
            eventually {
                docs.presentedItemURL?.path == target.path && inner.presentedItemURL?.path == target.path + "/a.txt"
            })
    }

    @Test("C16 presenters receive messages from adding to removing, and the list shows them") func c16() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let presenter = LoggingPresenter(name: "P", url: a, log: fx.log)
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        #expect(fx.domain.filePresenters.isEmpty)
        fx.domain.addFilePresenter(presenter)
        #expect(fx.domain.filePresenters.map { ObjectIdentifier($0) } == [ObjectIdentifier(presenter)])
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        #expect(fx.log.waitFor("P:relinquishToReader"))
        fx.domain.removeFilePresenter(presenter)
        #expect(fx.domain.filePresenters.isEmpty)
        try fx.coordinator().coordinate(readingItemAt: a) { _ in }
        usleep(50_000)
        #expect(fx.log.count("P:relinquishToReader") == 1)
    }

    @Test("C17 an access inside a file package is an access to the whole package") func c17() throws {
        let fx = try Fixture()
        try fx.package("Doc.pkg")
        let one = try fx.file("Doc.pkg/one"), two = try fx.file("Doc.pkg/sub/two")
        let writer = fx.holdWrite("W", one)
        #expect(writer.started(fx))
        let reader = fx.read("R", two)
        #expect(fx.waitForWaiters(1))
        try writer.release()
        try reader.join()
        #expect(fx.log.order("W-end", before: "R-run"))

        // By name extension too.
        fx.domain.packageExtensions = ["bundle"]
        try fx.directory("Notes.bundle")
        let page = try fx.file("Notes.bundle/page")
        let bundleWriter = fx.holdWrite("BW", fx.url("Notes.bundle"))
        #expect(bundleWriter.started(fx))
        let pageReader = fx.read("PR", page)
        #expect(fx.waitForWaiters(1))
        try bundleWriter.release()
        try pageReader.join()
    }

    @Test("C18 a plain directory and the items inside it do not block each other") func c18() throws {
        let fx = try Fixture()
        let dir = try fx.directory("dir")
        let inner = try fx.file("dir/a")
        let dirWriter = fx.holdWrite("D", dir)
        #expect(dirWriter.started(fx))
        try fx.write("inner", inner).join()
        try fx.read("inner-read", inner).join()
        #expect(fx.engine.snapshot().waiters.isEmpty)
        try dirWriter.release()
        let innerWriter = fx.holdWrite("I", inner)
        #expect(innerWriter.started(fx))
        try fx.write("dir", dir).join()
        try innerWriter.release()
    }

    @Test(
        "C19 deleting, moving or replacing a directory conflicts with everything inside it",
        arguments: [FileCoordinator.WritingOptions.forDeleting, .forMoving, .forReplacing])
    func c19(option: FileCoordinator.WritingOptions) throws {
        let fx = try Fixture()
        let dir = try fx.directory("dir")
        let inner = try fx.file("dir/sub/a")
        // Waits for access already running inside.
        let reader = fx.holdRead("R", inner, .immediatelyAvailableMetadataOnly)
        #expect(reader.started(fx))
        let remover = fx.write("X", dir, option)
        #expect(fx.waitForWaiters(1))
        try reader.release()
        try remover.join()
        #expect(fx.log.order("R-end", before: "X-run"))
        // Holds back access inside while it runs.
        let holder = fx.holdWrite("H", dir, option)
        #expect(holder.started(fx))
        let later = fx.read("L", inner)
        #expect(fx.waitForWaiters(1))
        try holder.release()
        try later.join()
        #expect(fx.log.order("H-end", before: "L-run"))
    }

    @Test("C20 a nested call on items the coordinator holds does not wait on itself") func c20() throws {
        let fx = try Fixture()
        let a = try fx.file("a"), dir = try fx.directory("d")
        let coordinator = fx.coordinator()
        let nested = Background {
            try coordinator.coordinate(writingItemAt: a) { url in
                try coordinator.coordinate(readingItemAt: url) { _ in }
                try coordinator.coordinate(writingItemAt: url) { _ in }
                try coordinator.coordinate(writingItemAt: dir, options: .forDeleting) { _ in }
                fx.log.add("nested-done")
            }
        }
        try nested.join(timeout: .seconds(5))
        #expect(fx.log.contains("nested-done"))
    }

    @Test("C21 a presenter's own coordinated write while saving is granted while the read waits") func c21() throws {
        let fx = try Fixture()
        let a = try fx.file("a", "old")
        let presenter = fx.presenter("P", "a")
        let own = fx.coordinator(presenter)
        presenter.onSave = {
            try? own.coordinate(writingItemAt: a) { url in try? Data("saved".utf8).write(to: url) }
        }
        let contents = try fx.coordinator().coordinate(readingItemAt: a) { try String(contentsOf: $0, encoding: .utf8) }
        #expect(contents == "saved")
        #expect(fx.isIdle)
    }

    @Test("C22 a presenter with no URL yet gets one after an access made on its behalf") func c22() throws {
        let fx = try Fixture()
        let presenter = fx.presenter("P", nil)
        let target = fx.url("untitled.txt")
        try fx.coordinator().coordinate(readingItemAt: try fx.file("other")) { _ in }
        // Its first save creates the item and names it.
        try fx.coordinator(presenter).coordinate(writingItemAt: target) { url in
            try Data("v1".utf8).write(to: url)
            presenter.presentedItemURL = url
        }
        try fx.coordinator().coordinate(readingItemAt: target) { _ in }
        #expect(fx.log.waitFor("P:relinquishToReader"))
        #expect(fx.log.events.allSatisfy { !$0.contains("other") })
    }

    @Test("C23 after cancel(), later calls fail without running their accessors") func c23() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let coordinator = fx.coordinator()
        coordinator.cancel()
        var ran = false
        #expect(throws: CocoaError(.userCancelled)) { try coordinator.coordinate(readingItemAt: a) { _ in ran = true } }
        #expect(throws: CocoaError(.userCancelled)) { try coordinator.coordinate(writingItemAt: a) { _ in ran = true } }
        let done = Gate()
        let log = fx.log
        coordinator.coordinate(with: [.writingIntent(with: a)], queue: OperationQueue()) { error in
            if error?.isCoordinationCancellation == true { log.add("cancelled") }
            done.open()
        }
        done.wait()
        #expect(!ran && log.contains("cancelled"))
        #expect(fx.isIdle)
    }

    @Test("C24 a move is reported only inside a coordinated write") func c24() throws {
        let fx = try Fixture()
        let a = try fx.file("a"), b = fx.url("b")
        let coordinator = fx.coordinator()
        #expect(throws: FileCoordinationError.moveReportedOutsideWrite) { try coordinator.reportMove(of: a, to: b) }
        try coordinator.coordinate(readingItemAt: a) { url in
            #expect(throws: FileCoordinationError.moveReportedOutsideWrite) {
                try coordinator.reportMove(of: url, to: b)
            }
        }
        try coordinator.coordinate(writingItemAt: a, options: .forMoving, writingItemAt: b, options: .forReplacing) {
            s, t in
            coordinator.item(at: s, willMoveTo: t)
            try FileManager.default.moveItem(at: s, to: t)
            coordinator.item(at: s, didMoveTo: t)
        }
    }

    @Test("C25 a prepared batch refuses resolvesSymbolicLink and forReplacing") func c25() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let coordinator = fx.coordinator()
        var ran = false
        #expect(throws: FileCoordinationError.self) {
            try coordinator.prepare(forReadingItemsAt: [a], options: .resolvesSymbolicLink, writingItemsAt: []) { _ in
                ran = true
            }
        }
        #expect(throws: FileCoordinationError.self) {
            try coordinator.prepare(forReadingItemsAt: [], options: [], writingItemsAt: [a], options: .forReplacing) {
                _ in ran = true
            }
        }
        #expect(!ran)
        try coordinator.prepare(forReadingItemsAt: [a], writingItemsAt: []) { completion in
            ran = true; completion()
        }
        #expect(ran && fx.isIdle)
    }

    @Test("C26 items compare by canonical path; non-file and relative URLs are refused") func c26() throws {
        let fx = try Fixture()
        let real = try fx.file("real/dir/a")
        try FileManager.default.createSymbolicLink(at: fx.url("link"), withDestinationURL: fx.url("real"))
        let spellings = [
            URL(fileURLWithPath: fx.root.path + "/real/./dir//a"),
            URL(fileURLWithPath: fx.root.path + "/real/dir/../dir/a"),
            URL(fileURLWithPath: fx.root.path + "/link/dir/a")
        ]
        for (index, spelling) in spellings.enumerated() {
            let holder = fx.holdWrite("W\(index)", real)
            #expect(holder.started(fx))
            let other = fx.read("R\(index)", spelling)
            #expect(fx.waitForWaiters(1), "\(spelling.path) is the same item")
            try holder.release()
            try other.join()
            #expect(fx.log.order("W\(index)-end", before: "R\(index)-run"))
        }
        #expect(throws: FileCoordinationError.self) {
            try fx.coordinator().coordinate(readingItemAt: URL(string: "https://example.com/a")!) { _ in }
        }
        #expect(throws: FileCoordinationError.self) {
            try fx.coordinator().coordinate(readingItemAt: URL(string: "file:relative/path")!) { _ in }
        }
    }

    @Test("C27 the engine's state can be dumped at any moment") func c27() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        _ = fx.presenter("P", "a")
        let holder = fx.holdWrite("W", a, .forMerging)
        #expect(holder.started(fx))
        let waiting = fx.read("R", a, .withoutChanges)
        #expect(fx.waitForWaiters(1))
        let dump = fx.domain.stateDump()
        #expect(dump.contains("HOLD") && dump.contains("write(4) \(a.path)"))
        #expect(dump.contains("WAIT") && dump.contains("read(1) \(a.path)"))
        #expect(dump.contains("PRESENT") && dump.contains(a.path))
        try holder.release()
        try waiting.join()
    }
}
