import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Gives the allocator's free memory back to the system once a server, or a mount, is idle.
///
/// glibc's malloc keeps an arena for each thread that allocated at once with another (up to
/// eight a CPU), and keeps what is freed in them for later. A server runs a thread a
/// connection, and a mount a thread a request it serves at once: after a burst the heap holds
/// far more than is in use, and keeps it while idle (a mount kept 651 MB with no clients after
/// one). `malloc_trim` returns the free pages of every arena, locking each while it does, so
/// it is run only where it costs nobody: for the daemon, when its last client has gone and two
/// seconds later none has come (`schedule`); for a mount, whose socket may be idle while the
/// kernel keeps it busy, once everything it serves has stood still for a while (`whenQuiet`).
package enum IdleTrim {
    private typealias Trim = @convention(c) (Int) -> Int32

    /// glibc's `malloc_trim`, which Swift's Glibc module does not declare; nil under another C
    /// library (nothing to trim then).
    private static let trim: Trim? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: Trim.self)
    }()

    private typealias SetOption = @convention(c) (Int32, Int32) -> Int32

    /// glibc's `mallopt`, undeclared as `malloc_trim` is.
    private static let setOption: SetOption? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return nil }
        return unsafeBitCast(symbol, to: SetOption.self)
    }()

    /// Keeps the allocator to one arena a CPU (two at least, eight at most) where glibc would
    /// make eight a CPU, unless `MALLOC_ARENA_MAX` says otherwise. A server's connection
    /// threads and a mount's workers spread what they free over every arena, and each arena
    /// keeps its peak: under the hostile soak's bursts of other users' holds and watches, a
    /// mount on two CPUs grew to 641 MiB with sixteen arenas, and to 372 MiB with two.
    /// Called once, as a server or mount starts, before its threads do.
    package static func limitArenas(processors: Int = ProcessInfo.processInfo.activeProcessorCount) {
        guard let setOption, ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil else { return }
        let mArenaMax: Int32 = -8  // M_ARENA_MAX, <malloc.h>
        _ = setOption(mArenaMax, Int32(min(8, max(2, processors))))
    }

    /// Trims after `delay` if `stillIdle` says so then.
    package static func schedule(after delay: Duration = .seconds(2), if stillIdle: @escaping @Sendable () -> Bool) {
        guard let trim else { return }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + delay.timeInterval) {
            if stillIdle() { _ = trim(0) }
        }
    }

    /// Looks at `work`, a number that moves with everything the caller serves, every `interval`
    /// until the watch returned is stopped, and trims once each time it has not moved for a
    /// whole interval: after each burst, never twice in one quiet spell, never while it moves.
    package static func whenQuiet(
        checkingEvery interval: Duration = .seconds(2),
        work: @escaping @Sendable () -> Int
    ) -> QuietTrim {
        guard let trim else { return QuietTrim(interval: interval, work: work, trim: nil) }
        return QuietTrim(interval: interval, work: work, trim: { _ = trim(0) })
    }
}

/// A watch of a process's work that trims once it has gone quiet (`IdleTrim.whenQuiet`).
package final class QuietTrim: Sendable {
    /// The work seen at the last look, and whether this quiet spell has been trimmed.
    private struct Spell {
        var work: Int?
        var trimmed = false
        var stopped = false
    }

    private let spell = Mutex(Spell())
    private let interval: Duration
    private let work: @Sendable () -> Int
    private let trim: @Sendable () -> Void

    /// Starts looking, unless there is nothing to `trim` with.
    init(interval: Duration, work: @escaping @Sendable () -> Int, trim: (@Sendable () -> Void)?) {
        self.interval = interval
        self.work = work
        self.trim = trim ?? {}
        if trim != nil { lookLater() }
    }

    private func lookLater() {
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + interval.timeInterval) { [weak self] in
            self?.look()
        }
    }

    private func look() {
        let now = work()
        let (trims, goesOn) = spell.withLock { current -> (Bool, Bool) in
            if current.stopped { return (false, false) }
            defer { current.work = now }
            if current.work != now {
                current.trimmed = false
                return (false, true)
            }
            if current.trimmed { return (false, true) }
            current.trimmed = true
            return (true, true)
        }
        if trims { trim() }
        if goesOn { lookLater() }
    }

    /// Stops looking (a look under way may still trim, once).
    package func stop() { spell.withLock { $0.stopped = true } }
}
