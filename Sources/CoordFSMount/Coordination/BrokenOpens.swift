import Coordination
import Synchronization

/// Opens that went ahead by a break (`WaitWatch`: the break time, a kernel lock, a settled
/// file), holding nothing, by process. Until its release each covers its process's next calls on
/// its item: they go ahead at once past whoever is in their way, as the open itself does with
/// every write it makes. Waiting again would cost the break time once more for an access the
/// process already has (root's SQLite fchowns the `-wal` it just opened; a program opens its
/// file a second time, or truncates it). A write covers any call; a read, only reads.
final class BrokenOpens: Sendable {
    struct Entry: Sendable {
        let token: UInt64
        let path: ItemPath
        let writes: Bool
    }

    /// The number of entries, read without the lock: every request that waits asks.
    private let count = Atomic<Int>(0)
    private let table = Mutex<(next: UInt64, byProcess: [Int32: [Entry]])>((0, [:]))

    /// Records an open of `path` by `process`; the token takes it out again.
    func add(_ process: Int32, _ path: ItemPath, writes: Bool) -> UInt64 {
        table.withLock { table in
            table.next += 1
            table.byProcess[process, default: []].append(Entry(token: table.next, path: path, writes: writes))
            count.add(1, ordering: .releasing)
            return table.next
        }
    }

    func remove(_ token: UInt64, of process: Int32) {
        table.withLock { table in
            guard let index = table.byProcess[process]?.firstIndex(where: { $0.token == token }) else { return }
            table.byProcess[process]!.remove(at: index)
            if table.byProcess[process]!.isEmpty { table.byProcess[process] = nil }
            if table.byProcess.isEmpty { table.byProcess = [:] }  // its storage goes too
            count.subtract(1, ordering: .releasing)
        }
    }

    /// Whether every one of `intents` is on an item that `process` has open by a break, by an
    /// open that covers it (a write, or a read for a read).
    func covers(_ intents: [Intent], of process: Int32) -> Bool {
        if count.load(ordering: .acquiring) == 0 { return false }
        return table.withLock { table in
            guard let entries = table.byProcess[process] else { return false }
            return intents.allSatisfy { intent in
                entries.contains { $0.path == intent.path && ($0.writes || !intent.kind.isWrite) }
            }
        }
    }
}
