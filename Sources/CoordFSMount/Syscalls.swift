import CFuse3
import Coordination
import FileCoordination
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An errno value: the only error type of the FUSE layer.
struct Errno: Error, Equatable {
    let code: Int32

    /// errno, read right after the failed call.
    static var current: Errno { Errno(code: cfs_errno()) }
}

/// Every system call of the mount goes through one of these: -1 becomes `Errno.current`.
@inline(__always)
func check(_ result: Int32) throws(Errno) -> Int32 {
    if result == -1 { throw Errno.current }
    return result
}

@inline(__always)
func check(_ result: Int) throws(Errno) -> Int {
    if result == -1 { throw Errno.current }
    return result
}

/// `stat` of the item `fd` refers to (an O_PATH descriptor is fine), not following links.
func statOf(_ fd: Int32) throws(Errno) -> stat {
    var info = stat()
    _ = try check(fstatat(fd, "", &info, CFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
    return info
}

/// The path under /proc that reopens an O_PATH descriptor with real access.
func procPath(_ fd: Int32) -> String { "/proc/self/fd/\(fd)" }

extension Errno {
    /// The errno for a refused or failed coordination: the one mapping the FUSE layer uses.
    static func from(coordination error: Error) -> Errno {
        switch error {
        case let error as FileCoordinationError:
            switch error {
            case .timedOut: return Errno(code: EBUSY)
            case .deadlock: return Errno(code: EDEADLK)
            case .wouldBlock: return Errno(code: EAGAIN)
            case .invalidURL, .emptyIntentList, .invalidOptions, .moveReportedOutsideWrite,
                 .invalidServiceName: return Errno(code: EINVAL)
            case .noSuchService, .noSuchItem: return Errno(code: ENOENT)
            case .systemError(_, let code): return Errno(code: code)
            }
        case let error as CocoaError where error.code == .userCancelled:
            return Errno(code: EINTR)
        case let error as POSIXError:
            return Errno(code: error.code.rawValue)      // a presenter's refusal, as it gave it
        default:
            return Errno(code: EACCES)                   // a presenter refused without an errno
        }
    }
}
