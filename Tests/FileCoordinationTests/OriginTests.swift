import Coordination
import FileCoordination
import Foundation
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its notes are behind a Mutex; the rest is immutable.
/// A presenter that notes the origin of each message it is sent and, asked to save, takes as
/// long as it is told, saying it is still working every `beat` while it does (or not).
private final class SlowSaver: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    let origins = Mutex<[String: AccessOrigin]>([:])
    let takes: Duration
    let beat: Duration?

    init(_ url: URL, takes: Duration = .zero, beat: Duration? = nil) {
        presentedItemURL = url
        self.takes = takes
        self.beat = beat
    }

    private func note(_ message: String) { origins.withLock { $0[message] = AccessOrigin.current } }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("relinquishToWriter")
        writer(nil)
    }

    func presentedItemDidChange() { note("didChange") }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("save")
        guard let progress = PresenterProgress.current, let url = presentedItemURL else {
            return completionHandler(nil)
        }
        // The work goes on off the queue; the progress object is kept for it.
        let (takes, beat) = (self.takes, self.beat)
        Thread.detachNewThread {
            let start = ContinuousClock.now
            while ContinuousClock.now - start < takes {
                Thread.sleep(forTimeInterval: (beat ?? takes).seconds)
                if beat != nil { progress.stillWorking() }
            }
            try? Data("saved".utf8).write(to: url)
            completionHandler(nil)
        }
    }
}

/// docs/swift.md: a presenter learns who made each access it is asked or told about, and may say it
/// is still working to have more time, up to the domain's limit.
@Suite struct OriginTests {
    @Test("a presenter's callbacks learn the origin of the access: this process's coordinator and its purpose")
    func callbacksLearnTheOrigin() throws {
        let fx = try Fixture()
        let file = try fx.file("doc")
        let presenter = SlowSaver(file)
        fx.domain.addFilePresenter(presenter)
        let coordinator = fx.coordinator()
        coordinator.purposeIdentifier = "org.example.editor"
        try coordinator.coordinate(writingItemAt: file) { try Data("new".utf8).write(to: $0) }
        #expect(eventually { presenter.origins.withLock { $0["didChange"] } != nil })
        let heard = presenter.origins.withLock { $0 }
        #expect(heard["relinquishToWriter"]?.via == .coordinator && heard["relinquishToWriter"]?.pid == getpid())
        #expect(heard["relinquishToWriter"]?.purposeIdentifier == "org.example.editor")
        #expect(heard["relinquishToWriter"]?.uid == geteuid() && heard["relinquishToWriter"]?.command?.isEmpty == false)
        #expect(heard["didChange"] == heard["relinquishToWriter"], "\(heard)")
        #expect(AccessOrigin.current == nil, "the origin is set only while a callback runs")
    }

    /// A coordinated read of a file whose presenter takes `takes` to save, saying it is still
    /// working every `beat` (or never), with a presenter timeout of 300 ms: what was read, how
    /// long the read waited, and what the domain reported.
    private func readWhileSaving(
        takes: Duration, beat: Duration?, workLimit: Duration? = nil
    ) throws
        -> (read: String, waited: Duration, reports: [String])
    {
        let fx = try Fixture(presenterTimeout: .milliseconds(300))
        if let workLimit { fx.domain.presenterWorkLimit = workLimit }
        let reports = EventLog()
        fx.domain.reportHandler = { reports.add($0.description) }
        let file = try fx.file("doc", "unsaved")
        fx.domain.addFilePresenter(SlowSaver(file, takes: takes, beat: beat))
        let start = ContinuousClock.now
        let read = try fx.coordinator().coordinate(readingItemAt: file) { try String(contentsOf: $0, encoding: .utf8) }
        return (read, ContinuousClock.now - start, reports.events)
    }

    @Test("a presenter that says it is still working keeps the access waiting past the presenter timeout")
    func stillWorkingExtendsTheDeadline() throws {
        let (read, waited, reports) = try readWhileSaving(takes: .milliseconds(900), beat: .milliseconds(150))
        #expect(read == "saved", "the reader went ahead before the save")
        #expect(waited >= .milliseconds(850))
        #expect(reports.isEmpty, "\(reports)")
    }

    @Test("without word that it is still working, a slow presenter is passed at the presenter timeout")
    func silenceEndsAtThePresenterTimeout() throws {
        let (read, waited, reports) = try readWhileSaving(takes: .milliseconds(1500), beat: nil)
        #expect(read == "unsaved")
        #expect(waited < .milliseconds(1200))
        #expect(reports.count == 1 && reports[0].contains("saveChanges"), "\(reports)")
    }

    @Test("still working extends a presenter's time only up to the domain's work limit")
    func stillWorkingIsBounded() throws {
        let (read, waited, reports) = try readWhileSaving(
            takes: .seconds(3), beat: .milliseconds(100), workLimit: .milliseconds(700))
        #expect(read == "unsaved")
        #expect(waited >= .milliseconds(650) && waited < .milliseconds(2000), "\(waited)")
        #expect(reports.count == 1 && reports[0].contains("saveChanges"), "\(reports)")
    }
}
