import CFuse3
import Coordination
import CoordinationRuntime
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

/// Monotonic milliseconds from the kernel's tick-resolution clock: a vDSO read with no
/// arithmetic on `Duration`, for the mount's per-request caches (whose lifetimes are seconds).
@inline(__always)
func coarseMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// The path under /proc that reopens an O_PATH descriptor with real access.
func procPath(_ fd: Int32) -> String { "/proc/self/fd/\(fd)" }

extension Errno {
    /// The errno for a refused or failed coordination; an interrupted wait is EINTR.
    static func from(coordination error: Error) -> Errno {
        Errno(code: FileCoordinationError.errno(for: error, cancellation: EINTR))
    }
}
