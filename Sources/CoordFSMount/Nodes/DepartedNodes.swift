import LinuxSystem

/// The places of the nodes the kernel forgot last, so that a file handle of one (the kernel's
/// handles name node ids) still opens it: `open_by_handle_at` after the kernel dropped its
/// inodes (`echo 3 > /proc/sys/vm/drop_caches`), an NFS server re-exporting the mount, a
/// backup tool that kept handles. Bounded: past `capacity` forgotten nodes the oldest go, and a
/// handle of one of them is stale (ESTALE), as it is after the mount is mounted again.
///
/// An item looked up by name again gets its old id back (`reclaim`): the kernel's handles of it
/// stay good whoever finds it first, the handle's owner or any other program (or the mount's
/// own watch) that named it meanwhile. A file with hard links is remembered by all the places
/// it was reached by: the one it was known by may be gone while it lives on under another
/// (a link made, then the original name unlinked: fstests generic/426, 467, 756).
///
/// Kept in the inode table's state, under its lock: a forget, a lookup and a revival each see
/// a node either known or departed, never neither.
struct DepartedNodes: ~Copyable {
    struct Record {
        let parent: NodeID
        let name: String
        let device: UInt64
        let number: UInt64
        let isDirectory: Bool
        /// A file seen with more than one link (`Inode.hasOtherLinks`): it may live on under a
        /// name the mount never knew, in one of the directories of its places.
        var hadOtherLinks = false
        /// The other places a file with hard links was reached by, most recent last
        /// (`Inode.otherPlaces`).
        var others: [Inode.Place] = []
        /// Its slot in the ring's order: an id that departed again has a later one.
        fileprivate(set) var slot = 0
    }

    private var records = ShardedDictionary<NodeID, Record>()
    /// The counted id each remembered item departed under last. A stable id (`NodeID.isStable`)
    /// is the item's own whoever finds it: never reclaimed by name, and not indexed here, so
    /// that the table's every new node need not be looked for in it (`remove(device:number:)`).
    /// Its record may outlive its node's return; the id's next departure replaces it.
    private var ids = ShardedDictionary<BackingInode, NodeID>()
    /// Ids in the order they departed; `next` is the oldest once the ring is full.
    private var order: [NodeID] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int = 131_072) { self.capacity = capacity }

    mutating func add(_ id: NodeID, _ record: Record) {
        var record = record
        if order.count < capacity {
            record.slot = order.count
            order.append(id)
        } else {
            // The oldest slot's id goes, unless it departed again since (a later slot).
            let oldest = order[next]
            if records[oldest]?.slot == next { remove(oldest) }
            record.slot = next
            order[next] = id
            next = (next + 1) % capacity
        }
        records[id] = record
        if !id.isStable { ids[BackingInode(device: record.device, number: record.number)] = id }
    }

    /// The place `id` was last known by, if it is remembered.
    func record(of id: NodeID) -> Record? { records[id] }

    /// Forgets `id`'s record (it is known again), and its item's id unless the item departed
    /// again under another. Its slot in the order stays until reused.
    mutating func remove(_ id: NodeID) {
        guard let record = records.removeValue(forKey: id) else { return }
        let item = BackingInode(device: record.device, number: record.number)
        if ids[item] == id { ids[item] = nil }
    }

    /// Forgets the record of the item `device`:`number` under a counted id: it is known again
    /// under an id of its own (`InodeTable`'s stable ids).
    mutating func remove(device: UInt64, number: UInt64) {
        guard !ids.isEmpty, let id = ids.removeValue(forKey: BackingInode(device: device, number: number)) else {
            return
        }
        records[id] = nil
    }

    /// The id the item `device`:`number` departed under, now that a lookup of `name` in
    /// `parent` found it again: no longer remembered as departed. Nil when it is not
    /// remembered, or was known by none of the places it departed from (its own, or another
    /// of a file with hard links), or as another type: its inode number may have gone to
    /// another item (as `InodeTable.revive` takes it, a place and the number together).
    mutating func reclaim(device: UInt64, number: UInt64, isDirectory: Bool, parent: NodeID, name: String) -> NodeID? {
        guard let id = ids[BackingInode(device: device, number: number)], let record = records[id],
            record.isDirectory == isDirectory
        else { return nil }
        let place = Inode.Place(parent: parent, name: name)
        guard record.parent == parent && record.name == name || record.others.contains(place) else { return nil }
        remove(id)
        return id
    }

    var count: Int { records.count }
}
