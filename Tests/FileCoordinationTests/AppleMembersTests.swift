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
        #expect(reports.events.count == 1 && reports.events[0].contains("presentedItemDidChangeUbiquityAttributes(_:)"),
                "\(reports.events)")
        // A presenter that observes none is registered without a word.
        fx.domain.addFilePresenter(ChangeOnlyPresenter(name: "p", url: try fx.file("other"), log: fx.log))
        #expect(reports.events.count == 1)
    }

    @Test("S3 Apple's getFileProviderConnection gives the connection on a background queue") func getFileProviderConnection() throws {
        let fx = try Fixture()
        let dir = try fx.directory("managed")
        _ = try FileProviderServices.vend(named: "echo", forItemAt: dir, domain: fx.domain, handler: ServiceRules.echo("echo"))
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
