import LinuxSystem
import CLinux
import CFusePassthrough
import CoordinationRuntime
#if canImport(Glibc)
import Glibc
#endif

/// The caller's umask, applied by the backing filesystem itself.
///
/// The kernel leaves modes unmasked and sends the caller's umask beside them (FUSE_DONT_MASK),
/// because only the filesystem knows whether a default ACL of the parent replaces the umask.
/// The backing filesystem knows: each thread that creates runs under the caller's umask, so a
/// create through the mount gets exactly the mode (and ACL) it would get on the backing
/// filesystem. A thread's umask is its own once it has a filesystem context of its own
/// (`cfs_own_umask_zero`: `unshare(CLONE_FS)`), which each thread makes at its first create.
enum CallerUmask {
    private struct State {
        var isOwn = false
        var current: mode_t = 0
    }

    private static let state = ThreadLocal { State() }

    /// Runs `body` (a create, mknod, mkdir or O_TMPFILE open) under the caller's umask, `mask`.
    @inline(__always)
    static func applying<Result, Failure: Error>(
        _ mask: mode_t, _ body: () throws(Failure) -> Result
    ) throws(Failure) -> Result {
        state.withValue { state in
            if !state.isOwn {
                // Threads share one context until they make their own; one that cannot keeps
                // the shared umask 0 and its creates get the kernel's unmasked mode.
                guard cfs_own_umask_zero() >= 0 else { return }
                state.isOwn = true
                state.current = 0
            }
            if state.current != mask {
                umask(mask)
                state.current = mask
            }
        }
        return try body()
    }
}
