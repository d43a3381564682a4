import LinuxSystem
import CoordinationRuntime
@testable import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Who calls the mount: a process's first thread is told without /proc, everyone else from it,
/// and both answers agree with the kernel's.
@Suite struct ProcessInfoCacheTests {
    @Test func aProcessOfItsOwnIsToldWithoutProcAndItsParentIsStillRead() throws {
        // A child in a process group of its own: this test's process may be in none (group 0).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        var child: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("30"), nil]
        defer { argv.forEach { free($0) } }
        try #require(posix_spawn(&child, "/bin/sleep", nil, &attributes, &argv, environ) == 0)
        defer { kill(child, SIGKILL); var status: Int32 = 0; waitpid(child, &status, 0) }

        #expect(ProcessInfoCache.isProcessOfItsOwn(child))
        let now = coarseMilliseconds()
        #expect(ProcessInfoCache.caller(of: child, now: now) == ProcFile.Caller(process: child, isKernelThread: false))
        // Remembered without its parent: asking for the parent reads /proc after all.
        #expect(ProcessInfoCache.parent(of: child, now: now) == getpid())
    }

    @Test func anotherThreadOfAProcessIsReadFromProc() {
        // @unchecked Sendable: written by one thread before the test reads it.
        final class Box: @unchecked Sendable { var threadID: Int32 = 0 }
        let box = Box(), started = DispatchSemaphore(value: 0), mayEnd = DispatchSemaphore(value: 0)
        Thread {
            let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
            box.threadID = link.split(separator: "/").last.flatMap { Int32($0) } ?? 0
            started.signal()
            mayEnd.wait()
        }.start()
        started.wait()
        defer { mayEnd.signal() }
        #expect(box.threadID > 0 && box.threadID != getpid())
        #expect(!ProcessInfoCache.isProcessOfItsOwn(box.threadID), "not its process's first thread")
        let caller = ProcessInfoCache.caller(of: box.threadID, now: coarseMilliseconds())
        #expect(caller.process == getpid() && !caller.isKernelThread)
    }

    @Test func aThreadThatIsGoneIsNoProcessOfItsOwn() {
        var child: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { free(argv[0]) }
        #expect(posix_spawn(&child, "/bin/true", nil, nil, &argv, environ) == 0)
        var status: Int32 = 0
        waitpid(child, &status, 0)
        #expect(!ProcessInfoCache.isProcessOfItsOwn(child))
    }

    @Test(.enabled(if: ProcFile.command(of: 2) == "kthreadd", "this /proc shows the host's kernel threads"))
    func kernelThreadsAreStillReadFromProc() {
        // kthreadd leads its own thread group, like every kernel thread: only its process group (0) tells.
        #expect(!ProcessInfoCache.isProcessOfItsOwn(2))
        #expect(ProcessInfoCache.caller(of: 2, now: coarseMilliseconds()).isKernelThread)
    }
}
