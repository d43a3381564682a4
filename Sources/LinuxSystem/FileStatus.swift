import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// `stat` of the item `fd` refers to (an O_PATH descriptor is fine), not following links.
@inlinable
package func statOf(_ fd: Int32) throws(Errno) -> stat {
    var info = stat()
    _ = try check(fstatat(fd, "", &info, CFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
    return info
}

/// The path under /proc that reopens an O_PATH descriptor with real access.
@inlinable
package func procPath(_ fd: Int32) -> String { "/proc/self/fd/\(fd)" }

/// The path the system gives the item `fd` refers to, as bytes (what /proc shows: a removed
/// item's ends in " (deleted)", a file whose name the system has forgotten is "/"); nil if none.
package func pathBytes(of fd: Int32) -> [UInt8]? {
    var bytes = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = bytes.withUnsafeMutableBufferPointer { buffer in
        buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
            readlink(procPath(fd), $0, buffer.count - 1)
        }
    }
    guard count > 0 else { return nil }
    return Array(bytes[..<count])
}

/// Monotonic milliseconds from the kernel's tick-resolution clock: a vDSO read with no
/// arithmetic on `Duration`, for per-request caches whose lifetimes are seconds.
@inlinable @inline(__always)
package func coarseMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// The next entry of a directory stream, nil at its end: readdir tells an error from the end
/// only by errno, cleared before.
package func nextEntry(of stream: OpaquePointer) throws(Errno) -> UnsafeMutablePointer<dirent>? {
    cfs_set_errno(0)
    if let entry = readdir(stream) { return entry }
    let failure = cfs_errno()
    if failure != 0 { throw Errno(code: failure) }
    return nil
}
