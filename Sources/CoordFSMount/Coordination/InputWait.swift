import CLinux
import Foundation
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

/// What a program asleep outside the mount waits for, as /proc shows it: input on a pipe, or on
/// a TCP connection to a socket of this host (the client of fstests' locktest between two
/// commands of its server, a worker reading its next job). Only the processes that hold the
/// other end can send it. Or a record lock (fcntl's F_SETLKW) another process holds: only that
/// process can let it go. When one process alone can wake it, and that process is itself
/// waiting in the mount for the sleeper's open file, each waits for the other, and nothing but
/// the break time would end it (`WaitWatch`, a holder waiting for its waiter).
///
/// Looked at with the rights /proc asks for another process's system call and descriptors
/// (ptrace's): a daemon that lacks them (run by a user, under Yama's ptrace scope) sees no
/// such wait, nor can it show that no other process holds an end.
enum InputWait {
    /// What would wake a thread: the other end of what it reads, a pipe (its write ends) or
    /// the peer socket of a TCP connection, each by its inode; or the process holding the record
    /// lock it waits for.
    enum Source: Hashable {
        case pipe(UInt64)
        case socket(UInt64)
        case lock(owner: Int32)

        /// How /proc/PID/fd names a descriptor of it (a lock is no descriptor's).
        var link: String? {
            switch self {
            case .pipe(let inode): "pipe:[\(inode)]"
            case .socket(let inode): "socket:[\(inode)]"
            case .lock: nil
            }
        }
    }

    /// What `process` waits for, when every one of its threads sleeps in a read (read, readv,
    /// recv, recvmsg) of a pipe, or of a TCP connection to a socket of this host with nothing
    /// left to read, or for a record lock: the other ends, and the locks' holders. Nil when a
    /// thread does anything else, or cannot be looked at.
    static func sources(of process: Int32) -> Set<Source>? {
        guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task"),
            !threads.isEmpty
        else { return nil }
        var sources: Set<Source> = []
        var locks: [Int32: Set<Int32>]?
        for thread in threads {
            switch sleep(of: "/proc/\(process)/task/\(thread)") {
            case .reading(let descriptor):
                guard let found = source(of: descriptor, in: process) else { return nil }
                sources.insert(found)
            case .lockWait:
                if locks == nil { locks = RecordLocks.awaitedOwners() }
                // Every lock its threads wait for, when one process holds them all (which of its
                // threads waits for which /proc/locks does not say).
                guard let owners = locks?[process], owners.count == 1, let owner = owners.first else { return nil }
                sources.insert(.lock(owner: owner))
            case nil:
                return nil
            }
        }
        return sources
    }

    /// Whether `process` holds `source` (of a pipe, a write end; a lock).
    static func isHeld(_ source: Source, by process: Int32) -> Bool {
        if case .lock(let owner) = source { return owner == process }
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/fd") else {
            return false
        }
        return descriptors.contains { holds(source, descriptor: $0, in: process) }
    }

    /// The processes that hold `source`, every process looked at (a walk over all of /proc);
    /// nil when one cannot be (another user's, to a daemon without privileges).
    static func holders(of source: Source) -> Set<Int32>? {
        // A process's record lock is let go by that process alone (or its end).
        if case .lock(let owner) = source { return [owner] }
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
        var holders: Set<Int32> = []
        for entry in entries {
            guard let process = Int32(entry) else { continue }
            guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/fd") else {
                // Gone since /proc was listed, it holds nothing; still there, it cannot be read.
                if access("/proc/\(process)", F_OK) == 0 { return nil }
                continue
            }
            if descriptors.contains(where: { holds(source, descriptor: $0, in: process) }) { holders.insert(process) }
        }
        return holders
    }

    /// Whether `process` runs a single thread: while that thread waits in the mount, the
    /// process can send nothing.
    static func hasOneThread(_ process: Int32) -> Bool {
        ProcFile.statusFields(["Threads"], of: process)?["Threads"] == "1"
    }

    /// What a sleeping thread waits in.
    private enum Sleep {
        case reading(Int32)
        case lockWait
    }

    /// What the thread whose /proc directory is `task` sleeps in: a read of a descriptor, or a
    /// wait for a record lock; nil for anything else.
    private static func sleep(of task: String) -> Sleep? {
        guard let stat = ProcFile.read(task + "/stat"), let close = stat.lastIndex(of: ")"),
            stat[stat.index(after: close)...].dropFirst().first == "S",
            let call = ProcFile.read(task + "/syscall")
        else { return nil }
        // "NUMBER 0xARGUMENT ... 0xSTACK 0xPC" while it sleeps in a system call ("running", or
        // -1, otherwise).
        let fields = call.split(separator: " ")
        guard fields.count > 2, let number = Int(fields[0]), fields[1].hasPrefix("0x"), fields[2].hasPrefix("0x"),
            let first = UInt(fields[1].dropFirst(2), radix: 16), let second = UInt(fields[2].dropFirst(2), radix: 16)
        else { return nil }
        if cfs_reads_one_descriptor(number) != 0 { return Int32(exactly: first).map(Sleep.reading) }
        return cfs_waits_for_record_lock(number, second) != 0 ? .lockWait : nil
    }

    /// The other end of `process`'s descriptor `descriptor`: its pipe's, or the peer's of the
    /// TCP connection it is.
    private static func source(of descriptor: Int32, in process: Int32) -> Source? {
        guard let named = link(of: "\(descriptor)", in: process) else { return nil }
        if let written = inode(in: named, kind: "pipe") { return .pipe(written) }
        guard let connection = inode(in: named, kind: "socket"), let other = peer(of: connection, seenBy: process)
        else { return nil }
        return .socket(other)
    }

    /// The peer of TCP socket `connection` in the tables of `process`'s network: nil unless it
    /// is established, its peer is a socket of this host, and nothing waits to be read on its
    /// side (its reader would not sleep long).
    private static func peer(of connection: UInt64, seenBy process: Int32) -> UInt64? {
        for table in ["tcp", "tcp6"] {
            guard let text = ProcFile.read("/proc/\(process)/net/\(table)") else { continue }
            // A heading, then "SL: LOCAL REMOTE STATE TX:RX TIMER:WHEN RETRANSMITS UID TIMEOUT
            // INODE ..." a socket (addresses and numbers in hexadecimal, the inode in decimal).
            let rows = text.split(separator: "\n").dropFirst().map { $0.split(separator: " ") }.filter { $0.count > 9 }
            guard let own = rows.first(where: { UInt64($0[9]) == connection }) else { continue }
            guard own[3] == "01", own[4].split(separator: ":").last.flatMap({ UInt64($0, radix: 16) }) == 0,
                let other = rows.first(where: { $0[1] == own[2] && $0[2] == own[1] }),
                let number = UInt64(other[9]), number != 0
            else { return nil }
            return number
        }
        return nil
    }

    /// Whether `process`'s descriptor `descriptor` (its name in /proc/PID/fd) is one of `source`.
    private static func holds(_ source: Source, descriptor: String, in process: Int32) -> Bool {
        guard let wanted = source.link, link(of: descriptor, in: process) == wanted else { return false }
        guard case .pipe = source else { return true }
        return writes(descriptor, in: process)
    }

    /// Whether `process`'s descriptor `descriptor` was opened for writing (the octal "flags:"
    /// of its /proc/PID/fdinfo).
    private static func writes(_ descriptor: String, in process: Int32) -> Bool {
        guard let info = ProcFile.read("/proc/\(process)/fdinfo/\(descriptor)"),
            let line = info.split(separator: "\n").first(where: { $0.hasPrefix("flags:") }),
            let flags = Int32(line.dropFirst("flags:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        else { return false }
        return flags & O_ACCMODE != O_RDONLY
    }

    /// What /proc/PID/fd/DESCRIPTOR links to ("pipe:[INODE]", "socket:[INODE]", a path).
    private static func link(of descriptor: String, in process: Int32) -> String? {
        var bytes = [CChar](repeating: 0, count: 256)
        let count = readlink("/proc/\(process)/fd/\(descriptor)", &bytes, bytes.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: bytes[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The inode of "KIND:[INODE]", as /proc names a pipe or a socket.
    private static func inode(in link: String, kind: String) -> UInt64? {
        guard link.hasPrefix(kind + ":["), link.hasSuffix("]") else { return nil }
        return UInt64(link.dropFirst(kind.count + 2).dropLast())
    }
}
