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
    /// serves it. Nil when one does, or when this cannot be told: a user other than root sees
    /// only its own processes, and an older kernel names no connection in /dev/fuse's fdinfo.
    /// Reads /proc only, never the mount. (It sees the processes of its own pid namespace: run
    /// where the daemons run.)
    static func mount(at path: String) -> MountTable.Entry? {
        guard geteuid() == 0,
            let mount = MountTable.entries().last(where: { $0.mountPoint == path }), mount.type == "fuse.coordfs",
            let minor = mount.device.split(separator: ":").last, mount.device.hasPrefix("0:")
        else { return nil }
        for (pid, connection) in fuseDescriptors() {
            // A /dev/fuse whose fdinfo names no connection (an older kernel) could be this one's.
            guard let connection else { return nil }
            if connection == minor && !isExiting(pid) { return nil }
        }
        return mount
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

    /// Every open /dev/fuse: its process, and the connection its fdinfo names.
    private static func fuseDescriptors() -> [(pid: Int32, connection: Substring?)] {
        var found: [(pid: Int32, connection: Substring?)] = []
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for name in processes {
            guard let pid = Int32(name) else { continue }
            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            for fd in descriptors {
                guard
                    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"))
                        == "/dev/fuse",
                    let info = ProcFile.read("/proc/\(pid)/fdinfo/\(fd)")
                else { continue }
                let line = info.split(separator: "\n").first { $0.hasPrefix("fuse_connection:") }
                found.append((pid, line?.dropFirst("fuse_connection:".count).drop(while: { $0 == "\t" || $0 == " " })))
            }
        }
        return found
    }

    /// Whether the process is dying: SIGKILL is pending (its threads act on it only once they
    /// leave the kernel), or its first thread has exited (then /proc shows none of its files),
    /// or it has gone.
    private static func isExiting(_ pid: Int32) -> Bool {
        guard let stat = ProcFile.read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: close)...].drop(while: { $0 == " " }).first
        if state == "Z" || state == "X" { return true }
        let pending = ProcFile.statusFields(["SigPnd", "ShdPnd"], of: pid) ?? [:]
        let killBit: UInt64 = 1 << (UInt64(SIGKILL) - 1)
        return pending.values.contains { UInt64($0, radix: 16).map { $0 & killBit != 0 } ?? false }
    }
}
