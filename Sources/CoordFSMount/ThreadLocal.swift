#if canImport(Glibc)
import Glibc
#endif

/// One value per thread, made on the thread's first use and released when the thread exits: a
/// cache in it is read and written without touching memory another thread writes.
final class ThreadLocal<Value: AnyObject>: @unchecked Sendable {
    private var key = pthread_key_t()
    /// False when the process is out of keys: every use then makes a fresh value (nothing is
    /// remembered, nothing is wrong).
    private let hasKey: Bool
    private let make: () -> Value

    init(_ make: @escaping () -> Value) {
        self.make = make
        hasKey = pthread_key_create(&key) { if let stored = $0 { Unmanaged<AnyObject>.fromOpaque(stored).release() } } == 0
    }

    /// Values of threads still running stay allocated (glibc retires the key's slots, it does
    /// not run their destructors); the owners are long-lived: a mount, or the process.
    deinit { if hasKey { pthread_key_delete(key) } }

    var value: Value {
        guard hasKey else { return make() }
        if let stored = pthread_getspecific(key) { return Unmanaged<Value>.fromOpaque(stored).takeUnretainedValue() }
        let value = make()
        pthread_setspecific(key, Unmanaged.passRetained(value as AnyObject).toOpaque())
        return value
    }
}
