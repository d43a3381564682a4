import LinuxSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Who calls, read from /proc: checked against what the kernel says through system calls.
@Suite struct ProcFileTests {
    @Test func aThreadWorksForItsProcess() throws {
        #expect(
            ProcFile.caller(of: getpid())
                == ProcFile.Caller(process: getpid(), isKernelThread: false, parent: getppid()))
        // @unchecked Sendable: written by one thread before the test reads it.
        final class Box: @unchecked Sendable { var threadID: Int32 = 0 }
        let box = Box(), started = DispatchSemaphore(value: 0), mayEnd = DispatchSemaphore(value: 0)
        Thread {
            box.threadID = Self.currentThreadID(); started.signal(); mayEnd.wait()
        }.start()
        started.wait()
        defer { mayEnd.signal() }
        #expect(box.threadID != getpid())
        #expect(
            ProcFile.caller(of: box.threadID)
                == ProcFile.Caller(process: getpid(), isKernelThread: false, parent: getppid()))
    }

    /// The calling thread's id, from /proc/thread-self ("PID/task/TID").
    private static func currentThreadID() -> Int32 {
        let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
        return link.split(separator: "/").last.flatMap { Int32($0) } ?? 0
    }

    // kthreadd is pid 2 wherever /proc shows the host's processes.
    @Test(
        .enabled(
            if: ProcFile.command(of: 2) == "kthreadd", "this /proc shows no kernel threads (pid 2 is not kthreadd)"))
    func kernelThreadsAreKnownAsSuch() {
        #expect(ProcFile.caller(of: 2)?.isKernelThread == true)
    }

    @Test func fieldsParentsAndGroupsMatchTheSystemCalls() throws {
        #expect(ProcFile.caller(of: getpid())?.parent == getppid())
        let fields = try #require(ProcFile.statusFields(["Name", "Groups", "NoSuchField"], of: getpid()))
        #expect(fields["Name"] == ProcFile.command(of: getpid()))
        #expect(fields["NoSuchField"] == nil)
        var groups = [gid_t](repeating: 0, count: Int(getgroups(0, nil)))
        _ = getgroups(Int32(groups.count), &groups)
        #expect(UnixSocket.groups(of: getpid(), primary: getgid()) == Set(groups).union([getgid()]))
    }

    @Test func aProcessThatIsGoneHasNoFields() {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { free(argv[0]) }
        #expect(posix_spawn(&pid, "/bin/true", nil, nil, &argv, environ) == 0)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        #expect(ProcFile.statusFields(["Tgid"], of: pid) == nil)
        #expect(ProcFile.caller(of: pid) == nil)
    }
}
