import LinuxSystem
import Synchronization

/// The places of the nodes the kernel forgot last, so that a file handle of one (the kernel's
/// handles name node ids) still opens it: `open_by_handle_at` after the kernel dropped its
/// inodes (`echo 3 > /proc/sys/vm/drop_caches`), an NFS server re-exporting the mount, a
/// backup tool that kept handles. Bounded: past `capacity` forgotten nodes the oldest go, and a
/// handle of one of them is stale (ESTALE), as it is after the mount is mounted again.
final class DepartedNodes: Sendable {
    struct Record {
        let parent: UInt64
        let name: String
        let device: UInt64
        let number: UInt64
        let isDirectory: Bool
    }

    private struct Ring {
        var records: [UInt64: Record] = [:]
        /// Ids in the order they departed; `next` is the oldest once the ring is full.
        var order: [UInt64] = []
        var next = 0
    }

    let capacity: Int
    private let ring = Mutex(Ring())

    init(capacity: Int = 131_072) { self.capacity = capacity }

    func add(_ id: UInt64, _ record: Record) {
        ring.withLock { ring in
            if ring.order.count < capacity {
                ring.order.append(id)
            } else {
                ring.records[ring.order[ring.next]] = nil
                ring.order[ring.next] = id
                ring.next = (ring.next + 1) % capacity
            }
            ring.records[id] = record
        }
    }

    /// The place `id` was last known by, if it is remembered.
    func record(of id: UInt64) -> Record? { ring.withLock { $0.records[id] } }

    /// Forgets `id`'s record (it is known again). Its slot in the order stays until reused.
    func remove(_ id: UInt64) { ring.withLock { _ = $0.records.removeValue(forKey: id) } }

    var count: Int { ring.withLock { $0.records.count } }
}
