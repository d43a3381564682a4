import Foundation
import TestSupport
import Testing

/// `--writeback-cache`: the kernel keeps written pages and writes them back later, from its own
/// flusher threads, while the open that wrote them may still hold its intent.
@Suite struct WritebackCache {
    @Test func theFlusherWritesBackWhileTheWriterStillHoldsTheFile() throws {
        // A wait timeout well above the test's own bound: waiting for the holder cannot pass.
        let fx = try MountFixture(["--writeback-cache", "--wait-timeout", "30"])
        try fx.seed("a.txt", "")
        let writer = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        #expect(writer.ask("write 1 first") == "ok")
        // Later writes move the file's times: the flusher then also writes the times back (SETATTR).
        Thread.sleep(forTimeInterval: 0.1)
        #expect(writer.ask("write 1 second") == "ok")
        _ = try FileManager.default.attributesOfItem(atPath: fx.path("a.txt"))

        let sync = try Child("/bin/sync", ["-f", fx.mountPoint.path])
        #expect(sync.waitForExit(timeout: .seconds(20)) == 0, "syncfs returns while the writer holds the file")
        #expect(
            try String(contentsOfFile: fx.backingPath("a.txt"), encoding: .utf8) == "first\nsecond\n",
            "the written pages reached the backing file")
        #expect(try fx.state().contains("HOLD"), "the writer still holds the file")
        let counters = try fx.statistics()
        #expect(counters["waited"] == 0 && counters["timed_out"] == 0, "\(counters)")
        #expect(writer.ask("close 1") == "ok")
    }

    @Test func aFileWrittenLargerThanTheDirtyLimitIsWrittenWhole() throws {
        // 96 MiB with the file held open: beyond the kernel's dirty-page share for one FUSE
        // mount (1 % of memory), so the flusher writes back during the writes.
        let fx = try MountFixture(["--writeback-cache", "--wait-timeout", "30"])
        let script = """
            import os, sys, zlib
            fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
            crc = 0
            for i in range(96):
                block = bytes([i]) * (1 << 20)
                os.write(fd, block)
                crc = zlib.crc32(block, crc)
            os.close(fd)
            print(crc)
            """
        let written = try run("/usr/bin/python3", ["-c", script, fx.path("big")])
        #expect(written.status == 0, "\(written.errors)")
        let check = try run(
            "/usr/bin/python3",
            ["-c", "import sys, zlib; print(zlib.crc32(open(sys.argv[1], 'rb').read()))", fx.backingPath("big")])
        #expect(!written.output.isEmpty && check.output == written.output, "the backing file holds every byte")
        let counters = try fx.statistics()
        #expect(counters["timed_out"] == 0, "\(counters)")
    }
}
