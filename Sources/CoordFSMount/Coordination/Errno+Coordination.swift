import CoordinationRuntime
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

extension Errno {
    /// The errno for a refused or failed coordination: the engine's own for its refusals
    /// (`CoordinationError.errno(cancellation:)`), a presenter's for its refusal; an interrupted
    /// wait is EINTR.
    static func from(coordination failure: AccessFailure) -> Errno {
        Errno(code: failure.errno(cancellation: Glibc.EINTR))
    }
}
