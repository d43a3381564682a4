import CLinux
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// A failed system call's errno (swift-system's type).
public typealias Errno = SystemPackage.Errno

extension Errno {
    @inlinable package init(code: Int32) { self.init(rawValue: code) }
    @inlinable package var code: Int32 { rawValue }

    /// errno, read right after the failed call.
    @inlinable package static var current: Errno { Errno(rawValue: cfs_errno()) }
}

/// Every system call outside the C modules goes through one of these: -1 becomes
/// `Errno.current`, so Swift code reads no errno of its own.
@inlinable @inline(__always)
package func check(_ result: Int32) throws(Errno) -> Int32 {
    if result == -1 { throw Errno.current }
    return result
}

@inlinable @inline(__always)
package func check(_ result: Int) throws(Errno) -> Int {
    if result == -1 { throw Errno.current }
    return result
}

/// A call that the kernel may interrupt with a signal before it has done anything, made again
/// until it is not.
@inlinable @inline(__always)
package func retryingInterrupts<T: BinaryInteger>(_ call: () -> T) throws(Errno) -> T {
    while true {
        let result = call()
        if result != -1 { return result }
        let failure = Errno.current
        if failure != .interrupted { throw failure }
    }
}

/// Runs `body` and gives errno back the value it had: a signal handler's calls must not change
/// the errno of the code the signal interrupted. As async-signal-safe as `body` is.
@inlinable @inline(__always)
package func preservingErrno(_ body: () -> Void) {
    let saved = cfs_errno()
    defer { Glibc.errno = saved }
    body()
}
