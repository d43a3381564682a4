import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Gives the allocator's free memory back to the system once a server has no clients left.
///
/// glibc's malloc keeps an arena for each thread that allocated at once with another (up to
/// eight a CPU), and keeps what is freed in them for later. A server runs a thread a
/// connection: after a burst of clients the daemon's heap holds far more than is in use, and
/// keeps it while idle. `malloc_trim` returns the free pages of every arena; it is run when
/// the last client has gone and two seconds later none has come, where it costs nobody.
enum IdleTrim {
    private typealias Trim = @convention(c) (Int) -> Int32

    /// glibc's `malloc_trim`, which Swift's Glibc module does not declare; nil under another C
    /// library (nothing to trim then).
    private static let trim: Trim? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: Trim.self)
    }()

    /// Trims after `delay` if `stillIdle` says so then.
    static func schedule(after delay: Duration = .seconds(2), if stillIdle: @escaping @Sendable () -> Bool) {
        guard let trim else { return }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + delay.timeInterval) {
            if stillIdle() { _ = trim(0) }
        }
    }
}
