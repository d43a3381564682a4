import Coordination
import FileCoordination
import Foundation
import Synchronization
import TestSupport
import Testing

// @unchecked Sendable: immutable.
/// A presenter written for Apple platforms that asks for iCloud's ubiquity attributes.
private final class UbiquitousPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [.ubiquitousItemIsDownloadingKey] }
    init(_ url: URL) { presentedItemURL = url }
    func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {}
}

/// Members of Apple's protocols with no Linux meaning are refused where it can be seen, and
/// Apple's spellings of the rest are there (issue: every member has a meaning or a refusal).
@Suite struct AppleMembersTests {
    @Test func aPresenterThatObservesUbiquityAttributesIsToldTheyNeverCome() throws {
        let fx = try Fixture()
        let reports = EventLog()
        fx.domain.reportHandler = { reports.add($0.description) }
        fx.domain.addFilePresenter(UbiquitousPresenter(try fx.file("doc")))
        #expect(
            reports.events.count == 1 && reports.events[0].contains("presentedItemDidChangeUbiquityAttributes(_:)"),
            "\(reports.events)")
        // A presenter that observes none is registered without a word.
        fx.domain.addFilePresenter(ChangeOnlyPresenter(name: "p", url: try fx.file("other"), log: fx.log))
        #expect(reports.events.count == 1)
    }

    @Test(
        "P33 eviction: a forEvicting write asks the item's presenters, and those inside a directory, to accommodate it")
    func evictionAsksPresentersToAccommodateIt() throws {
        let fx = try Fixture()
        let a = try fx.file("dir/a")
        let item = fx.presenter("item", "dir/a")
        let parent = fx.presenter("parent", "dir")
        try fx.coordinator().coordinate(writingItemAt: a, options: .forEvicting) { _ in fx.log.add("evict") }
        #expect(fx.log.order("item:relinquishToWriter", before: "item:accommodateEviction"))
        #expect(fx.log.order("item:accommodateEviction", before: "evict"))
        // The name stays: the enclosing directory is asked nothing, unlike a deletion.
        #expect(!fx.log.events.contains { $0.hasPrefix("parent:accommodate") })
        // Evicting the directory asks what is inside it.
        try fx.coordinator().coordinate(writingItemAt: fx.url("dir"), options: .forEvicting) { _ in
            fx.log.add("evict dir")
        }
        #expect(fx.log.events.filter { $0 == "item:accommodateEviction" }.count == 2)
        #expect(fx.log.order("parent:accommodateEviction", before: "evict dir"))
        // A refusal keeps the content: the accessor does not run.
        item.evictionError = PresenterRefusal(code: 16)
        var ran = false
        #expect(throws: PresenterRefusal(code: 16)) {
            try fx.coordinator().coordinate(writingItemAt: a, options: .forEvicting) { _ in ran = true }
        }
        #expect(!ran && fx.isIdle)
        _ = parent
    }

    @Test("P33 a presenter that does not implement eviction refuses it, as on Apple platforms")
    func aPresenterWithoutAnEvictionCallbackRefuses() throws {
        let fx = try Fixture()
        let doc = try fx.file("doc")
        fx.domain.addFilePresenter(ChangeOnlyPresenter(name: "p", url: doc, log: fx.log))
        var ran = false
        #expect {
            try fx.coordinator().coordinate(writingItemAt: doc, options: .forEvicting) { _ in ran = true }
        } throws: { error in
            (error as? CocoaError)?.code == .featureUnsupported && error.localizedDescription.contains("eviction")
        }
        #expect(!ran)
        // Other writes are not refused by it.
        try fx.coordinator().coordinate(writingItemAt: doc) { _ in ran = true }
        #expect(ran)
    }

    @Test("S3 Apple's getFileProviderConnection gives the connection on a background queue")
    func getFileProviderConnection() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        _ = try FileProviderServices.vend(
            named: "echo", forItemAt: dir, domain: fx.domain, handler: ServiceRules.echo("echo"))
        let service = try FileProviderServices.service(named: "echo", forItemAt: dir, domain: fx.domain)
        let got = Mutex<FileHandle?>(nil)
        service.getFileProviderConnection { connection, error in
            #expect(error == nil)
            got.withLock { $0 = connection }
        }
        #expect(eventually { got.withLock { $0 } != nil })
        let connection = try #require(got.withLock { $0 })
        connection.write(Data("hello\n".utf8))
        #expect(connection.readLine() == "echo managed: hello")
    }
}
