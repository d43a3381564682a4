import LinuxSystem

/// The record locks of this host as /proc/locks shows them: which process holds the lock each
/// waiting process waits for.
///
/// A held lock's line ("N: POSIX ADVISORY WRITE PID DEV:INO START END") is followed by its
/// waiters' ("N: -> POSIX ..."), each indented deeper when the kernel queued it behind another
/// waiter it conflicts with. Whatever its place in that queue, a waiter goes ahead only once the
/// held lock at the head of its group is let go: that lock's process is the one it waits for.
enum RecordLocks {
    /// For each process waiting for a record lock (fcntl's, owned by a process), the processes
    /// holding what it waits for; empty when /proc/locks cannot be read.
    static func awaitedOwners() -> [Int32: Set<Int32>] {
        guard let text = ProcFile.read("/proc/locks") else { return [:] }
        return owners(awaitedIn: text)
    }

    /// `awaitedOwners` of /proc/locks' text.
    static func owners(awaitedIn text: String) -> [Int32: Set<Int32>] {
        var awaited: [Int32: Set<Int32>] = [:]
        var held: (kind: Substring, process: Int32)?
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let words = line[line.index(after: colon)...].split(separator: " ")
            let waits = words.first == "->"
            let fields = Array(waits ? words.dropFirst() : words[...])
            guard fields.count >= 4, let process = Int32(fields[3]) else {
                if !waits { held = nil }
                continue
            }
            guard waits else {
                held = (fields[0], process)
                continue
            }
            // Open-file-description and flock locks are let go by any process sharing the
            // description: only a process's own record lock names the one that can.
            guard let held, held.kind == "POSIX", fields[0] == "POSIX", held.process > 0 else { continue }
            awaited[process, default: []].insert(held.process)
        }
        return awaited
    }
}
