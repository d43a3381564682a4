#if canImport(Glibc)
import Glibc
#endif

/// The signals a long-running subcommand is stopped with.
enum Signals {
    static let stopping = [SIGTERM, SIGINT, SIGHUP, SIGQUIT]

    /// Undoes what a spawner left behind: a signal mask and ignored signals are inherited across
    /// exec. Foundation's `Process`, a test runner's threads and some service managers leave
    /// SIGTERM blocked or ignored, and a `coordfs watch` started so would never end on it.
    /// Called first thing, before any thread starts (threads inherit the mask too).
    static func resetInherited() {
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        for signal in stopping { Glibc.signal(signal, SIG_DFL) }
    }
}
