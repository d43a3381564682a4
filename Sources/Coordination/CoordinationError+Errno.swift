#if canImport(Glibc)
import Glibc
#endif

extension CoordinationError {
    /// The errno that reports this refusal to a process, through a mount or the control socket:
    /// the one table of them, which the layers above also answer with for the errors they turn
    /// the engine's refusals into. `cancellation` is the errno of a cancelled wait: EINTR for an
    /// interrupted system call, ECANCELED for a cancelled request.
    public func errno(cancellation: Int32) -> Int32 {
        switch self {
        // A coordinator that went away while waiting cancelled its wait, as far as anyone can tell.
        case .cancelled, .ownerGone: return cancellation
        // A wait broken through ends, if it ever fails, as one that ran out of time.
        case .timedOut, .brokenThrough: return EBUSY
        case .deadlock: return EDEADLK
        case .wouldBlock: return EAGAIN
        case .notInsideWrite, .invalidRequest: return EINVAL
        case .unknownRegistration: return ENOENT
        }
    }
}
