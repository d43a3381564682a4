import CoordinationRuntime
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

extension Errno {
    /// The errno for a refused or failed coordination; an interrupted wait is EINTR.
    static func from(coordination error: Error) -> Errno {
        Errno(code: FileCoordinationError.errno(for: error, cancellation: Glibc.EINTR))
    }
}
