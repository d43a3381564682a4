@testable import CoordinationRuntime
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A mount gives its free memory back once its work has gone quiet: once in each quiet spell,
/// never while the work moves, and not after the watch is stopped.
@Suite struct IdleTrimTests {
    @Test func aQuietSpellIsTrimmedOnceAndMovingWorkStartsAnother() throws {
        let work = EventLog(), trims = EventLog()
        let watch = QuietTrim(interval: .milliseconds(50), work: { work.events.count }, trim: { trims.add("trim") })
        defer { watch.stop() }
        #expect(trims.waitFor("trim"), "quiet from the start")
        usleep(500_000)  // ten looks at the same work
        #expect(trims.count("trim") == 1, "once a quiet spell")
        // Work that moves between every two looks is never trimmed under; once it stops, it is, once.
        let before = trims.count("trim")
        for _ in 0..<200 { work.add("request"); usleep(2_000) }
        let during = trims.count("trim") - before
        #expect(during <= 1, "at most a look that fell between two requests")
        usleep(400_000)  // the two looks that find the work still again, with room to spare
        let settled = trims.count("trim")
        #expect(settled == before + during + 1, "the quiet spell after the work, once")
        usleep(500_000)
        #expect(trims.count("trim") == settled)
        // Stopped, it trims no more, whatever the work does.
        watch.stop()
        usleep(100_000)
        let stopped = trims.count("trim")
        work.add("request")
        usleep(500_000)
        #expect(trims.count("trim") == stopped)
    }
}
