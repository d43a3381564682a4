import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A command run for the caller in the foreground, as `flock FILE CMD` and `env CMD` run one:
/// in our process group, so that it keeps the terminal (Foundation's `Process` puts its child
/// in a group of its own, where reading the terminal stops it); with default signals and an
/// empty mask; and with the descriptors we were given.
///
/// While it runs, SIGINT and SIGQUIT are ignored here (a terminal sends them to the whole group,
/// and the command decides whether they end it) and SIGTERM and SIGHUP are passed on to it:
/// whoever holds something for the command's sake holds it until the command has ended, not
/// until the command was asked to.
enum ForegroundCommand {
    /// Runs `arguments` (the first found on PATH) and waits for it to end. Its exit status, or
    /// 128 plus the signal that ended it, as shells report it.
    static func run(_ arguments: [String]) throws(SpawnFailure) -> Int32 {
        let forwarded = [SIGTERM, SIGHUP], ignored = [SIGINT, SIGQUIT]
        for signal in forwarded { install(signal, handler: forwardToCommand) }
        for signal in ignored { Glibc.signal(signal, SIG_IGN) }
        defer {
            commandProcess.store(0, ordering: .sequentiallyConsistent)
            for signal in forwarded + ignored { Glibc.signal(signal, SIG_DFL) }
        }
        let pid = try spawn(arguments)
        commandProcess.store(pid, ordering: .sequentiallyConsistent)
        // A signal that came before the command existed is passed on now (`forwardToCommand`).
        let early = pendingSignal.exchange(0, ordering: .sequentiallyConsistent)
        if early != 0 { kill(pid, early) }
        // Waited for without reaping first: while the command is a zombie its pid cannot be
        // given to another process, so a signal passed on before the pid is cleared reaches
        // nobody else. Reaped once it is.
        var ended = siginfo_t()
        _ = try? retryingInterrupts { waitid(P_PID, id_t(pid), &ended, WEXITED | WNOWAIT) }
        commandProcess.store(0, ordering: .sequentiallyConsistent)
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Why a command could not start: its name and the errno.
    struct SpawnFailure: Error, CustomStringConvertible {
        let command: String
        let errno: Int32
        /// As shells exit: 127 when the command is not found, 126 when it cannot be run.
        var exitStatus: Int32 { errno == ENOENT ? 127 : 126 }
        var description: String { "cannot run \(command): \(String(cString: strerror(errno)))" }
    }

    private static func spawn(_ arguments: [String]) throws(SpawnFailure) -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in Signals.stopping + [SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let error = posix_spawnp(&pid, arguments[0], nil, &attributes, argv, environ)
        guard error == 0 else { throw SpawnFailure(command: arguments[0], errno: error) }
        return pid
    }

    private static func install(_ signal: Int32, handler: @convention(c) (Int32) -> Void) {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = handler
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(signal, &action, nil)
    }
}

/// The running command's pid, 0 while there is none; and a signal that came before it started.
private let commandProcess = Atomic<Int32>(0)
private let pendingSignal = Atomic<Int32>(0)

/// The handler of SIGTERM and SIGHUP while a command runs (only async-signal-safe calls). Of
/// it and `ForegroundCommand.run`, whichever takes the pending signal passes it on.
private func forwardToCommand(_ signal: Int32) {
    preservingErrno {
        let pid = commandProcess.load(ordering: .sequentiallyConsistent)
        if pid > 0 { kill(pid, signal); return }
        pendingSignal.store(signal, ordering: .sequentiallyConsistent)
        let started = commandProcess.load(ordering: .sequentiallyConsistent)
        if started > 0, pendingSignal.exchange(0, ordering: .sequentiallyConsistent) != 0 { kill(started, signal) }
    }
}
