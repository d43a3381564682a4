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

    /// errno, read right after the failed call. Only here: elsewhere a call's failure is read
    /// from its result (`check`, `failure`), so that errno enters Swift at one place.
    @usableFromInline static var current: Errno { Errno(rawValue: cfs_errno()) }

    /// errno after a call that tells its failure otherwise than by -1 (a null pointer, a
    /// negative count): read right after it.
    @inlinable @inline(__always)
    package static func ofFailedCall() -> Errno { current }
}

extension Int32 {
    /// A system call's result: its errno when it failed (-1), nil otherwise. For callers that
    /// answer with the failure instead of throwing it (`check`).
    @inlinable @inline(__always)
    package var failure: Errno? { self == -1 ? Errno.current : nil }
}

extension Int {
    /// A system call's result: its errno when it failed (-1), nil otherwise.
    @inlinable @inline(__always)
    package var failure: Errno? { self == -1 ? Errno.current : nil }
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
