import Coordination
import FileCoordination
import Foundation
import TestSupport
import Testing

/// Bad input gets a clear error or a bounded wait — never a crash or a stuck lock.
@Suite struct BadInput {
    @Test func relativeAndNonFileURLsAreRefused() throws {
        let fx = try Fixture()
        let coordinator = fx.coordinator()
        for url in [URL(string: "file:relative.txt")!, URL(string: "http://host/a")!, URL(string: "mailto:x@y")!] {
            #expect(throws: FileCoordinationError.self) { try coordinator.coordinate(writingItemAt: url) { _ in } }
            let done = Gate()
            let log = fx.log
            coordinator.coordinate(with: [.readingIntent(with: url)], queue: OperationQueue()) { error in
                log.add(error is FileCoordinationError ? "refused" : "accepted")
                done.open()
            }
            done.wait()
        }
        #expect(fx.log.events == ["refused", "refused", "refused"])
        #expect(fx.isIdle)
    }

    @Test func emptyIntentListIsRefused() async throws {
        let fx = try Fixture()
        let done = Gate()
        let log = fx.log
        fx.coordinator().coordinate(with: [], queue: OperationQueue()) { error in
            log.add(error as? FileCoordinationError == .emptyIntentList ? "refused" : "accepted")
            done.open()
        }
        done.wait()
        #expect(log.events == ["refused"])
        await #expect(throws: FileCoordinationError.emptyIntentList) {
            try await fx.coordinator().coordinate(with: []) {}
        }
        let op = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: []) { _ in }
        await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
            op.completionBlock = { finished.resume() }
            OperationQueue().addOperation(op)
        }
        #expect(op.error as? FileCoordinationError == .emptyIntentList)
    }

    @Test func aThrowingAccessorReleasesEverything() throws {
        struct Boom: Error, Equatable {}
        let fx = try Fixture()
        let a = try fx.file("a"), b = try fx.file("b")
        #expect(throws: Boom()) {
            try fx.coordinator().coordinate(readingItemAt: a, writingItemAt: b) { _, _ in throw Boom() }
        }
        #expect(fx.isIdle)
        let op = CoordinatedAccessOperation(coordinator: fx.coordinator(), intents: [.writingIntent(with: a)]) { _ in
            throw Boom()
        }
        OperationQueue().addOperations([op], waitUntilFinished: true)
        #expect(op.error as? Boom == Boom())
        #expect(fx.isIdle)
        try fx.coordinator().coordinate(writingItemAt: a) { _ in }
    }

    @Test func aPresenterWhoseQueueIsSuspendedForeverDelaysOnlyByTheTimeout() throws {
        let fx = try Fixture(presenterTimeout: .milliseconds(200))
        let a = try fx.file("a")
        let presenter = fx.presenter("P", "a")
        presenter.presentedItemOperationQueue.isSuspended = true
        let start = ContinuousClock.now
        for _ in 0..<3 { try fx.coordinator().coordinate(readingItemAt: a) { _ in } }
        #expect(ContinuousClock.now - start < .seconds(3))
        #expect(fx.isIdle)
    }

    @Test func invalidWritingOptionCombinationsAreRefused() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let unknown = FileCoordinator.WritingOptions(rawValue: 64)
        #expect(throws: FileCoordinationError.self) {
            try fx.coordinator().coordinate(writingItemAt: a, options: unknown) { _ in }
        }
        #expect(throws: FileCoordinationError.self) {
            try fx.coordinator().coordinate(writingItemAt: a, options: [.forMoving, .forReplacing]) { _ in }
        }
    }
}

/// The async/await forms.
@Suite struct SwiftConcurrency {
    @Test("C13 cancelling a task cancels its wait") func taskCancellation() async throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let log = fx.log
        let task = Task { try await fx.coordinator().read(at: a) { _ in log.add("ran") } }
        #expect(fx.waitForWaiters(1))
        task.cancel()
        await #expect(throws: CocoaError(.userCancelled)) { try await task.value }
        #expect(!log.contains("ran"))
        try holder.release()
        #expect(fx.isIdle)
    }

    @Test("C5 an async accessor holds the access until it returns") func asyncAccessor() async throws {
        let fx = try Fixture()
        let a = try fx.file("a", "v1")
        let contents = try await fx.coordinator().write(at: a) { url -> String in
            try await Task.sleep(for: .milliseconds(20))
            #expect(fx.engine.snapshot().holders.count == 1)
            try Data("v2".utf8).write(to: url)
            return try String(contentsOf: url, encoding: .utf8)
        }
        #expect(contents == "v2" && fx.isIdle)
        let intents = [FileAccessIntent.readingIntent(with: a), .writingIntent(with: fx.url("copy"))]
        try await fx.coordinator().coordinate(with: intents) {
            try FileManager.default.copyItem(at: intents[0].url, to: intents[1].url)
        }
        #expect(FileManager.default.contentsEqual(atPath: a.path, andPath: fx.url("copy").path))
    }
}
