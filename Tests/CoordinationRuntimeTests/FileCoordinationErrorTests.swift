import Coordination
import CoordinationRuntime
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The errno a process is answered with for a failed coordination, through a mount or the
/// control socket: the engine's table for the engine's refusals, however they travel (as they
/// came, or turned into the API's errors), and a presenter's own errno for its refusal.
@Suite struct FileCoordinationErrorTests {
    static let item = "/data/a.txt"

    /// Every refusal of the engine (`CoordinationErrorTests` holds their errnos).
    static let refusals: [CoordinationError] = [
        .cancelled, .ownerGone, .timedOut, .brokenThrough, .deadlock(cycle: [.process(1), .process(2)]), .wouldBlock,
        .notInsideWrite, .invalidRequest("no intents"), .unknownRegistration
    ]

    /// A presenter's refusal that carries no errno.
    struct Refusal: Error {}

    @Test("C13 X1 X5 a refusal of the engine answers with the engine's errno, as it came or as the API's error")
    func engineRefusalsAnswerWithTheEnginesErrno() {
        for refusal in Self.refusals {
            for cancellation in [EINTR, ECANCELED] {
                let engines = refusal.errno(cancellation: cancellation)
                let failure = AccessFailure.refused(refusal, item: Self.item)
                #expect(failure.errno(cancellation: cancellation) == engines, "\(refusal)")
                let api = FileCoordinationError.from(refusal, item: Self.item)
                #expect(FileCoordinationError.errno(for: api, cancellation: cancellation) == engines, "\(api)")
                #expect(FileCoordinationError.errno(for: failure, cancellation: cancellation) == engines, "\(refusal)")
            }
        }
    }

    @Test("C13 X5 an access refused by the engine reports the API's error, cancellation as Apple's")
    func engineRefusalsReportTheAPIsError() {
        for refusal in Self.refusals {
            let failure = AccessFailure.refused(refusal, item: Self.item)
            #expect("\(failure)" == "\(FileCoordinationError.from(refusal, item: Self.item))")
        }
        #expect(AccessFailure.refused(.cancelled, item: Self.item).error.isCoordinationCancellation)
        #expect(AccessFailure.refused(.ownerGone, item: Self.item).error.isCoordinationCancellation)
        let timedOut = AccessFailure.refused(.timedOut, item: Self.item).error as? FileCoordinationError
        #expect(timedOut == .timedOut(item: Self.item))
    }

    @Test("C12 P14 a presenter's refusal answers with its own errno, else EACCES")
    func presenterRefusalsAnswerWithTheirOwnErrno() {
        for cancellation in [EINTR, ECANCELED] {
            let withErrno = AccessFailure.failed(POSIXError(.EROFS))
            #expect(withErrno.errno(cancellation: cancellation) == EROFS)
            #expect(FileCoordinationError.errno(for: POSIXError(.EROFS), cancellation: cancellation) == EROFS)
            #expect(AccessFailure.failed(Refusal()).errno(cancellation: cancellation) == EACCES)
            #expect(FileCoordinationError.errno(for: Refusal(), cancellation: cancellation) == EACCES)
        }
        #expect(AccessFailure.failed(POSIXError(.EROFS)).error is POSIXError, "the presenter's own error")
    }

    @Test func theAPIsOwnErrorsAnswerWithTheirErrno() {
        let errnos: [(FileCoordinationError, Int32)] = [
            (.invalidURL("not a file URL"), EINVAL), (.emptyIntentList, EINVAL), (.invalidServiceName("empty"), EINVAL),
            (.noSuchItem(Self.item), ENOENT), (.systemError("cannot snapshot", ENOSPC), ENOSPC),
            (.coordinationBroken(Self.item), EIO)
        ]
        for (error, expected) in errnos {
            #expect(FileCoordinationError.errno(for: error, cancellation: EINTR) == expected, "\(error)")
        }
    }
}
