#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: each thread reaches only its own value.
/// One value per thread, made on the thread's first use and destroyed when the thread exits: a
/// cache in it is read and written without touching memory another thread writes.
///
/// The value is a struct reached through a pointer: a per-request cache kept in a class's
/// stored properties paid for dynamic exclusivity checks and a retain and release on every use.
package final class ThreadLocal<Value>: @unchecked Sendable {
    private let key: pthread_key_t
    /// False when the process is out of keys: every use then works on a fresh value (nothing is
    /// remembered, nothing is wrong).
    private let hasKey: Bool
    private let make: () -> Value

    package init(_ make: @escaping () -> Value) {
        self.make = make
        var key = pthread_key_t()
        hasKey =
            pthread_key_create(&key) { if let stored = $0 { Unmanaged<AnyObject>.fromOpaque(stored).release() } } == 0
        self.key = key
    }

    /// Values of threads still running stay allocated (glibc retires the key's slots, it does
    /// not run their destructors); the owners are long-lived: a mount, or the process.
    deinit { if hasKey { pthread_key_delete(key) } }

    /// Runs `body` on the calling thread's value.
    @inline(__always)
    package func withValue<Result>(_ body: (inout Value) -> Result) -> Result {
        guard hasKey else {
            var fresh = make()
            return body(&fresh)
        }
        // A ManagedBuffer's header is reached by pointer: no exclusivity check, and the
        // thread's reference is borrowed, not retained.
        guard let stored = pthread_getspecific(key) else {
            let storage = ManagedBuffer<Value, UInt8>.create(minimumCapacity: 0) { _ in make() }
            // Not kept (out of memory): this use works on it, the next makes another.
            if pthread_setspecific(key, Unmanaged.passRetained(storage).toOpaque()) != 0 {
                Unmanaged.passUnretained(storage).release()
            }
            return storage.withUnsafeMutablePointerToHeader { body(&$0.pointee) }
        }
        return Unmanaged<ManagedBuffer<Value, UInt8>>.fromOpaque(stored)._withUnsafeGuaranteedRef { storage in
            storage.withUnsafeMutablePointerToHeader { body(&$0.pointee) }
        }
    }
}
