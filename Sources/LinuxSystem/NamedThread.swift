import CLinux
import Foundation

extension Thread {
    /// The longest name the system keeps for a thread, in bytes (TASK_COMM_LEN less its NUL).
    static let longestSystemName = 15

    /// Starts `body` on a thread of its own, named `name` for the system: `top -H`, `perf`,
    /// /proc/PID/task/TID/comm and Foundation's `Thread.current.name` show it. The thread names
    /// itself as it begins: Foundation's setter reaches the system only once it knows the
    /// thread's pthread, which a thread that runs at once may not yet be known by. A name
    /// longer than `longestSystemName` bytes is cut there.
    @discardableResult
    public static func start(named name: String, _ body: @escaping @Sendable () -> Void) -> Thread {
        let systemName = Self.systemName(name)
        let thread = Thread {
            _ = cfs_name_this_thread(systemName)
            body()
        }
        thread.start()
        return thread
    }

    /// `name` cut to what the system keeps, on a character's boundary.
    static func systemName(_ name: String) -> String {
        var kept = "", bytes = 0
        for character in name {
            bytes += character.utf8.count
            guard bytes <= longestSystemName else { break }
            kept.append(character)
        }
        return kept
    }
}
