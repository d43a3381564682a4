import Coordination

/// Why an access failed, as the runtime tells its own callers (a mount's request, a control
/// socket's hold): the engine's refusal as the engine gave it, so that they answer it with the
/// engine's errno and never look at Foundation's errors, or an error that is not the engine's,
/// as it came. The API's error (`error`) is made from it for those who report one.
package enum AccessFailure: Error, CustomStringConvertible {
    /// The engine refused the request or ended its wait, or the access gave up waiting for that
    /// reason (its timeout, a cancellation); `item` is the one the API's error names (the first
    /// of the access's).
    case refused(CoordinationError, item: String)
    /// A presenter's own refusal (C12, P14), or another process's mount's refusal of a hold.
    case failed(any Error)

    /// The error the API reports: a `FileCoordinationError`, `CocoaError(.userCancelled)` for a
    /// cancellation, or the presenter's own.
    package var error: any Error {
        switch self {
        case .refused(let refusal, let item): return FileCoordinationError.from(refusal, item: item)
        case .failed(let error): return error
        }
    }

    /// The errno that reports the failure to a process: the engine's for its refusals
    /// (`CoordinationError.errno(cancellation:)`); a presenter's as `FileCoordinationError.errno`
    /// answers it (its POSIX code, else EACCES). `cancellation` is the errno of a cancelled wait.
    package func errno(cancellation: Int32) -> Int32 {
        switch self {
        case .refused(let refusal, _): return refusal.errno(cancellation: cancellation)
        case .failed(let error): return FileCoordinationError.errno(for: error, cancellation: cancellation)
        }
    }

    /// The API's error's description.
    package var description: String { "\(error)" }
}
