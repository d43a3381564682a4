/// The descriptors the inode table holds, one slot a node, in arrays kept side by side:
/// eviction reads and writes these arrays, and a node only where it would close its descriptor.
/// Reached only under the table's lock.
///
/// A request pins a node's descriptor without the lock (`InodeTable.pin`): it counts itself in
/// the node's `pins`, then reads its `descriptor`. A slot is given up (`detachIfUnpinned`) the
/// other way round: the node's `descriptor` cleared, then its `pins` read, both sequentially
/// consistent, so that one of the two sees the other. A pin that read no descriptor takes the
/// lock; a slot found pinned is given its descriptor back.
struct DescriptorSlots {
    var descriptors: [Int32] = []
    /// Each slot's last use on `clock`; `UInt64.max` for one never evicted, or free. A pin
    /// without the lock marks the node `usedLately` instead: the eviction gives such a slot a
    /// second chance, its use moved to now.
    var uses: [UInt64] = []
    /// The node holding each slot; nil when it is free.
    var owners: [Inode?] = []
    var free: [Int] = []
    /// Counts uses, for `uses`.
    var clock: UInt64 = 0

    /// Descriptors held: the slots in use.
    var open: Int { descriptors.count - free.count }

    /// The slot holding `inode`'s descriptor, if it holds one.
    func slot(of inode: Inode) -> Int? {
        let slot = inode.slot
        return slot >= 0 && owners[slot] === inode ? slot : nil
    }

    /// Gives `inode` the descriptor `fd`; one not `evictable` stays for the node's life.
    mutating func attach(_ fd: Int32, to inode: Inode, evictable: Bool) {
        let use = evictable ? clock : .max
        if let slot = free.popLast() {
            descriptors[slot] = fd
            uses[slot] = use
            owners[slot] = inode
            inode.slot = slot
        } else {
            inode.slot = descriptors.count
            descriptors.append(fd)
            uses.append(use)
            owners.append(inode)
        }
        inode.descriptor.store(fd, ordering: .sequentiallyConsistent)
    }

    /// Records a use of `inode` now.
    mutating func touch(_ inode: Inode) {
        clock += 1
        if let slot = slot(of: inode), uses[slot] != .max { uses[slot] = clock }
    }

    /// Frees `slot` unless a request has its descriptor pinned; returns the descriptor, to be
    /// closed, or nil (pinned: the slot stays as it was).
    mutating func detachIfUnpinned(_ slot: Int) -> Int32? {
        guard let inode = owners[slot] else { return nil }
        let fd = descriptors[slot]
        inode.descriptor.store(-1, ordering: .sequentiallyConsistent)
        if inode.pins.load(ordering: .sequentiallyConsistent) > 0 {
            inode.descriptor.store(fd, ordering: .sequentiallyConsistent)
            return nil
        }
        descriptors[slot] = -1
        uses[slot] = .max
        owners[slot] = nil
        free.append(slot)
        return fd
    }

    /// The unpinned slots of nodes that keep their descriptor for life (`attach`, not evictable).
    func keptForLife() -> [Int] {
        uses.indices.filter {
            uses[$0] == .max && owners[$0].map { $0.pins.load(ordering: .relaxed) == 0 } ?? false
        }
    }

    /// Over `budget`: the least recently used unpinned descriptors that can be reopened, down
    /// to about nine tenths of it. Returns them to close outside the lock.
    ///
    /// The lock is held, so only the arrays are read, side by side, and the age to evict up to
    /// is found from a sample of the uses (`age`), not by sorting candidates out of every inode.
    /// `secondChances`: a node pinned since is passed over this time (not when descriptors ran
    /// out, `InodeTable.withDescriptorRoom`).
    mutating func evict(budget: Int, secondChances: Bool = true) -> [Int32] {
        guard open > budget else { return [] }
        let excess = open - budget * 9 / 10
        let newestEvicted = Self.age(evicting: excess, of: uses)
        var evicted: [Int32] = []
        evicted.reserveCapacity(excess + excess / 4)
        for slot in uses.indices where uses[slot] <= newestEvicted {
            // Used since its use was written: a second chance, its use now (each its own, as
            // `age` counts them). (A pinned one is in use right now: it is seldom this old.)
            if secondChances, owners[slot]?.usedLately.exchange(false, ordering: .relaxed) == true {
                clock += 1
                uses[slot] = clock
            } else if let fd = detachIfUnpinned(slot) {
                evicted.append(fd)
            }
        }
        return evicted
    }

    /// The `count`-th oldest of `uses`, those that are `UInt64.max` (never evicted, or free)
    /// aside. An evenly strided sample of at most 1024 brackets it; one pass counts the uses
    /// below the bracket and gathers those within (about 1000 of 12 000), and the answer is
    /// selected among these: a selection among all of them would hold the lock longer.
    static func age(evicting count: Int, of uses: [UInt64]) -> UInt64 {
        guard count > 0 else { return 0 }
        let stride = max(1, uses.count / 1024)
        var sample: [UInt64] = []
        sample.reserveCapacity(uses.count / stride + 1)
        var evictable = 0, untilSampled = 0
        for use in uses where use != .max {
            if untilSampled == 0 {
                sample.append(use)
                untilSampled = stride
            }
            untilSampled -= 1
            evictable += 1
        }
        guard count < evictable else { return .max - 1 }
        // The rank in the sample, give or take five standard deviations of a sample's rank.
        let center = count * sample.count / evictable
        let share = Double(count) / Double(evictable)
        let margin = Int(5 * (Double(sample.count) * share * (1 - share)).squareRoot()) + 4
        let low = center - margin > 0 ? select(center - margin, in: &sample) : 0
        let high = center + margin < sample.count ? select(center + margin, in: &sample) : .max - 1
        var below = 0
        var within: [UInt64] = []
        within.reserveCapacity(2 * margin * stride + stride)
        for use in uses where use != .max {
            if use < low { below += 1 } else if use <= high { within.append(use) }
        }
        let rank = count - 1 - below
        guard rank >= 0, rank < within.count else {
            // Missed (a sample that far off is all but impossible): select among them all.
            var all = uses.filter { $0 != .max }
            return select(count - 1, in: &all)
        }
        return select(rank, in: &within)
    }

    /// The value that would stand at `rank` if `values` were sorted (quickselect; `values` is
    /// reordered).
    static func select(_ rank: Int, in values: inout [UInt64]) -> UInt64 {
        var low = 0, high = values.count - 1
        while low < high {
            let pivot = values[low + (high - low) / 2]
            var left = low, right = high
            while left <= right {
                while values[left] < pivot { left += 1 }
                while values[right] > pivot { right -= 1 }
                if left <= right {
                    values.swapAt(left, right)
                    left += 1
                    right -= 1
                }
            }
            if rank <= right { high = right } else if rank >= left { low = left } else { return values[rank] }
        }
        return values[rank]
    }
}
