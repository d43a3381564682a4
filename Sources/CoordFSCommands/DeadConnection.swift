import LinuxSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A FUSE mount whose daemon was killed while the kernel still waits for it.
///
/// A daemon killed while one of its threads waits in the kernel (an invalidation waiting for
/// a directory's lock, which a rename the daemon was still to answer holds) cannot finish
/// dying: that thread cannot be woken, so the daemon's /dev/fuse stays open and the kernel
/// never ends the mount's connection. Every program waiting in the mount then waits for ever,
/// past SIGKILL, and so does anything that touches the mount (a stat of it included). Only an
/// abort of the connection frees them: umount(2)'s MNT_FORCE, which FUSE takes as one.
enum DeadConnection {
    /// The coordfs mount at `path` (absolute, as mountinfo lists it) when no living process
    /// serves it. Nil whenever that cannot be told for sure: a user other than root, or a root
    /// in a pid namespace of its own, does not see every process; a process whose files root
    /// may not read (no CAP_SYS_PTRACE, `hidepid`) could be the daemon; an older kernel names
    /// no connection in /dev/fuse's fdinfo. Reads /proc only, never the mount.
    static func mount(at path: String) -> MountTable.Entry? {
        guard geteuid() == 0, seesEveryProcess,
            let mount = MountTable.entries().last(where: { $0.mountPoint == path }), mount.type == "fuse.coordfs",
            let minor = mount.device.split(separator: ":").last, mount.device.hasPrefix("0:"),
            let descriptors = fuseDescriptors()
        else { return nil }
        for (pid, connection) in descriptors {
            // A /dev/fuse whose fdinfo names no connection (an older kernel) could be this one's.
            guard let connection else { return nil }
            if connection == minor && !isExiting(pid) { return nil }
        }
        return mount
    }

    /// Whether this process sees every process: it is in the first pid namespace (its NSpid
    /// names one pid, not one for each namespace it is nested in).
    private static var seesEveryProcess: Bool {
        guard let pids = ProcFile.statusFields(["NSpid"], of: getpid())?["NSpid"] else { return false }
        return pids.split(whereSeparator: { $0 == " " || $0 == "\t" }).count == 1
    }

    /// `path` made absolute, and rid of `.`, `..` and doubled slashes, by its text alone: a
    /// URL of it would stat it, and a stat of such a mount waits for ever.
    static func absolute(_ path: String) -> String {
        let whole = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var parts: [Substring] = []
        for part in whole.split(separator: "/") where part != "." {
            if part == ".." { _ = parts.popLast() } else { parts.append(part) }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// Ends the mount's connection (the programs waiting in it get ENOTCONN, the killed daemon
    /// finishes dying) and unmounts it, or detaches it while those programs still hold files there.
    static func abort(_ mount: MountTable.Entry) throws(Errno) {
        do throws(Errno) { _ = try check(umount2(mount.mountPoint, Int32(MNT_FORCE))) } catch {
            guard error == .resourceBusy else { throw error }
            _ = try check(umount2(mount.mountPoint, Int32(MNT_DETACH)))
        }
    }

    /// Every open /dev/fuse: its process, and the connection its fdinfo names. Nil when a
    /// process's files could not be read for another reason than its end.
    private static func fuseDescriptors() -> [(pid: Int32, connection: Substring?)]? {
        var found: [(pid: Int32, connection: Substring?)] = []
        guard let processes = names(in: "/proc") else { return nil }
        for name in processes {
            guard let pid = Int32(name) else { continue }
            // A process whose first thread has ended shows its files under its other threads.
            var directory = "/proc/\(pid)"
            if !isLive(pid, task: name),
                let other = names(in: "\(directory)/task")?.first(where: { $0 != name && isLive(pid, task: $0) })
            {
                directory += "/task/\(other)"
            }
            guard let descriptors = names(in: "\(directory)/fd") else {
                if Errno.ofFailedCall() == .noSuchFileOrDirectory { continue }  // ended meanwhile
                return nil
            }
            for fd in descriptors {
                guard let info = ProcFile.read("\(directory)/fdinfo/\(fd)") else { continue }
                let line = info.split(separator: "\n").first { $0.hasPrefix("fuse_connection:") }
                if let line {
                    found.append(
                        (pid, line.dropFirst("fuse_connection:".count).drop(while: { $0 == "\t" || $0 == " " })))
                } else if (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/fd/\(fd)"))
                    == "/dev/fuse"
                {
                    found.append((pid, nil))
                }
            }
        }
        return found
    }

    /// The names in a directory; nil when it cannot be read (errno says why).
    private static func names(in directory: String) -> [String]? {
        guard let stream = opendir(directory) else { return nil }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Whether every thread of the process is ending: each has exited, or has SIGKILL pending
    /// (a thread acts on it only once it leaves the kernel), or the process has gone.
    private static func isExiting(_ pid: Int32) -> Bool {
        guard let tasks = names(in: "/proc/\(pid)/task") else { return true }
        return !tasks.contains { isLive(pid, task: $0) }
    }

    /// Whether a thread of the process runs on: not exited, and not killed.
    private static func isLive(_ pid: Int32, task: String) -> Bool {
        guard let status = ProcFile.read("/proc/\(pid)/task/\(task)/status") else { return false }
        var state = "", killed = false
        let killBit: UInt64 = 1 << (UInt64(SIGKILL) - 1)
        for line in status.split(separator: "\n") {
            if line.hasPrefix("State:") {
                state = String(line.dropFirst(6).drop(while: { $0 == " " || $0 == "\t" }).prefix(1))
            }
            if line.hasPrefix("SigPnd:") || line.hasPrefix("ShdPnd:"),
                let pending = UInt64(line.split(separator: "\t").last ?? "", radix: 16), pending & killBit != 0
            {
                killed = true
            }
        }
        return state != "Z" && state != "X" && !killed
    }
}
