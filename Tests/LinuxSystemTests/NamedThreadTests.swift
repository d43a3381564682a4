import Foundation
import Testing

@testable import LinuxSystem

/// Threads named for the system: what /proc shows of them, as `top -H` and perf read it.
@Suite struct NamedThreadTests {
    /// From its first step, as the thread itself and /proc see it; a name longer than the
    /// system keeps is cut.
    @Test(arguments: [("coordfs-test", "coordfs-test"), ("coordfs-client 123456", "coordfs-client ")])
    func theSystemKnowsAThreadByItsNameFromItsFirstStep(name: String, shown: String) throws {
        // @unchecked Sendable: written by the thread before it signals, read after.
        final class Seen: @unchecked Sendable { var comm = "", foundationName: String? }
        let seen = Seen(), done = DispatchSemaphore(value: 0)
        Thread.start(named: name) {
            seen.comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            seen.foundationName = Thread.current.name
            done.signal()
        }
        done.wait()
        #expect(seen.comm == shown + "\n")
        #expect(seen.foundationName == shown)
    }

    @Test func aNameIsCutOnACharactersBoundary() {
        #expect(Thread.systemName("coordfs-backing-watch") == "coordfs-backing")
        // "é" is two bytes, the 15th and 16th: cut whole.
        #expect(Thread.systemName("coordfs-watch-é") == "coordfs-watch-")
        #expect(Thread.systemName("short") == "short")
    }
}
