@testable import FileCoordination
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Every `FileCoordinationError` reaches `NSError` code (an Apple-style caller's `error:`) in
/// `NSCocoaErrorDomain`, with the documented code and a description of its own; one about an
/// item names it.
@Suite struct ErrorBridgingTests {
    static let documented: [(FileCoordinationError, Int)] = [
        (.noSuchItem("/data/a.txt"), 4),
        (.timedOut(item: "/data/a.txt"), 255),
        (.invalidURL("not a file URL: https://example.com"), 262),
        (.systemError("cannot snapshot /data/a.txt", ENOENT), 4),
        (.systemError("cannot snapshot /data/a.txt", EACCES), 257),
        (.systemError("cannot snapshot /data/a.txt", ENOSPC), 640),
        (.systemError("cannot snapshot /data/a.txt", EIO), 512),
        (.emptyIntentList, 100_001),
        (.invalidOptions("prepare does not take forReplacing"), 100_002),
        (.deadlock(item: "/data/a.txt", cycle: ["pid:1#2", "pid:3#4"]), 100_003),
        (.moveReportedOutsideWrite, 100_004),
        (.wouldBlock(item: "/data/a.txt"), 100_005),
        (.noSuchService("backup"), 100_006),
        (.invalidServiceName("empty"), 100_007),
        (.coordinationBroken("/data/a.txt"), 100_008)
    ]

    @Test(arguments: 0..<documented.count)
    func bridgesWithItsDocumentedDomainAndCode(_ index: Int) {
        let (error, code) = Self.documented[index]
        let bridged = error as NSError
        #expect(bridged.domain == NSCocoaErrorDomain)
        #expect(bridged.code == code, "\(error)")
        #expect(bridged.localizedDescription == error.description)
        #expect(!bridged.localizedDescription.isEmpty && !bridged.localizedDescription.contains("(null)"))
    }

    @Test func theCodesAreDistinctWhereApplesAreNot() {
        // Each case of coordfs's own has a code no other case has.
        let own = Self.documented.map(\.1).filter { $0 > 100_000 }
        #expect(Set(own).count == own.count)
    }

    @Test func anErrorAboutAnItemNamesIt() {
        for error in [
            FileCoordinationError.noSuchItem("/data/a.txt"), .coordinationBroken("/data/a.txt"),
            .timedOut(item: "/data/a.txt"),
            .deadlock(item: "/data/a.txt", cycle: ["pid:1#2", "pid:3#4"]), .wouldBlock(item: "/data/a.txt")
        ] {
            let bridged = error as NSError
            #expect(bridged.userInfo[NSFilePathErrorKey] as? String == "/data/a.txt")
            #expect(bridged.localizedDescription.contains("/data/a.txt"))
        }
        let failed = FileCoordinationError.systemError("cannot snapshot /data/a.txt", EACCES) as NSError
        let underlying = failed.userInfo[NSUnderlyingErrorKey] as? NSError
        #expect(underlying?.domain == NSPOSIXErrorDomain && underlying?.code == Int(EACCES))
        // A deadlock names the other parties too.
        #expect(
            (FileCoordinationError.deadlock(item: "/data/a.txt", cycle: ["pid:1#2", "pid:3#4"]) as NSError)
                .localizedDescription
                == "waiting for /data/a.txt would deadlock: pid:1#2 -> pid:3#4")
    }

    @Test func cancellationIsApplesUserCancelled() {
        let cancelled = FileCoordinationError.from(.cancelled, item: "/data/a.txt") as NSError
        #expect(cancelled.domain == NSCocoaErrorDomain && cancelled.code == 3072)
    }
}
