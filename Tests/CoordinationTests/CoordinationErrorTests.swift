import Coordination
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The errno each refusal of the engine reports to a process, through a mount or the control
/// socket: one table, every case in it.
@Suite struct CoordinationErrorTests {
    /// Every case, with its errno; nil for a cancelled wait's, which its caller chooses.
    static let errnos: [(CoordinationError, Int32?)] = [
        (.cancelled, nil),
        (.ownerGone, nil),
        (.timedOut, EBUSY),
        (.brokenThrough, EBUSY),
        (.deadlock(cycle: [.process(1), .client(process: 2, number: 1)]), EDEADLK),
        (.wouldBlock, EAGAIN),
        (.notInsideWrite, EINVAL),
        (.invalidRequest("no intents"), EINVAL),
        (.unknownRegistration, ENOENT)
    ]

    /// The case's name: a case added to `CoordinationError` stops this from compiling until it
    /// is named here, and then `errnos` must list it.
    static func name(_ error: CoordinationError) -> String {
        switch error {
        case .cancelled: "cancelled"
        case .timedOut: "timedOut"
        case .deadlock: "deadlock"
        case .wouldBlock: "wouldBlock"
        case .ownerGone: "ownerGone"
        case .notInsideWrite: "notInsideWrite"
        case .invalidRequest: "invalidRequest"
        case .unknownRegistration: "unknownRegistration"
        case .brokenThrough: "brokenThrough"
        }
    }

    @Test("C13 X1 X4 X5 every refusal reports its errno; a cancelled wait, and one whose owner went, the caller's")
    func everyCaseHasItsErrno() {
        #expect(Set(Self.errnos.map { Self.name($0.0) }).count == 9, "every case listed once")
        for (error, reported) in Self.errnos {
            for cancellation in [EINTR, ECANCELED] {
                #expect(error.errno(cancellation: cancellation) == reported ?? cancellation, "\(error)")
            }
        }
    }
}
