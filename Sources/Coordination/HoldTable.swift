/// The holds on items, by path: an open-addressing table with linear probing that starts from
/// the hash each `ItemPath` carries. A `Dictionary` runs SipHash over that hash on every lookup
/// and keeps keys, values and occupancy in three places; every request looks its items up here
/// (even one that ends on the short list), usually on memory another CPU touched last, so both
/// the hashing and the extra cache lines are worth saving.
///
/// The stored hash is FNV-1a, which anyone who names files can aim at; it is mixed with a
/// random seed per table before it picks a slot, so names cannot be aimed at one run of slots
/// without knowing the seed (full 64-bit FNV collisions collide in any table, as they do in a
/// `Dictionary`).
struct HoldTable: Sequence {
    fileprivate struct Entry {
        let path: ItemPath
        var holds: State.Holds
    }

    private var slots: [Entry?]
    /// Each slot's path hash with its low bit set, or 0 while the slot is empty: probes read
    /// these plain integers and look at an entry (and its path's bytes) only on a match.
    private var keys: [Int]
    private(set) var count = 0
    private let seed: UInt64

    init(capacity: Int = 16, seed: UInt64 = .random(in: .min ... .max)) {
        self.seed = seed
        var size = 8
        while size < capacity { size *= 2 }
        slots = Array(repeating: nil, count: size)
        keys = Array(repeating: 0, count: size)
    }

    /// The holds on `path`, if any.
    subscript(path: ItemPath) -> State.Holds? {
        guard let index = index(of: path) else { return nil }
        return slots[index]?.holds
    }

    /// Adds `hold` to the holds on `path`.
    mutating func append(_ hold: consuming State.Hold, at path: ItemPath) {
        if let index = index(of: path) {
            slots[index]!.holds.append(hold)
            return
        }
        // At most three quarters full, so that every probe ends soon at an empty slot.
        if (count + 1) * 4 > slots.count * 3 { grow() }
        insertNew(Entry(path: path, holds: State.Holds(hold)))
        count += 1
    }

    /// Removes the hold of `grant` on `path`, and the entry with its last hold.
    mutating func remove(grant: GrantID, at path: ItemPath) {
        guard let index = index(of: path) else { return }
        slots[index]!.holds.remove(grant: grant)
        if slots[index]!.holds.isEmpty { removeEntry(at: index) }
    }

    struct Iterator: IteratorProtocol {
        fileprivate let slots: [Entry?]
        fileprivate var index = 0

        mutating func next() -> (path: ItemPath, holds: State.Holds)? {
            while index < slots.count {
                defer { index += 1 }
                if let entry = slots[index] { return (entry.path, entry.holds) }
            }
            return nil
        }
    }

    /// Every held item, in no particular order.
    func makeIterator() -> Iterator { Iterator(slots: slots) }

    // MARK: Slots

    private var mask: Int { slots.count - 1 }

    private func home(of path: ItemPath) -> Int { home(ofKey: Self.key(of: path)) }

    private func home(ofKey key: Int) -> Int {
        // The finalizer of MurmurHash3: every bit of the seeded hash reaches the low bits.
        var hash = UInt64(UInt(bitPattern: key)) ^ seed
        hash ^= hash >> 33
        hash &*= 0xff51_afd7_ed55_8ccd
        hash ^= hash >> 33
        hash &*= 0xc4ce_b9fe_1a85_ec53
        hash ^= hash >> 33
        return Int(truncatingIfNeeded: hash) & mask
    }

    private static func key(of path: ItemPath) -> Int { path.hashCode | 1 }

    private func index(of path: ItemPath) -> Int? {
        guard count > 0 else { return nil }
        let key = Self.key(of: path)
        var index = home(of: path)
        while true {
            let found = keys[index]
            if found == 0 { return nil }
            if found == key && slots[index]!.path == path { return index }
            index = (index + 1) & mask
        }
    }

    private func isVacant(_ index: Int) -> Bool { keys[index] == 0 }

    private mutating func insertNew(_ entry: consuming Entry) {
        var index = home(of: entry.path)
        while !isVacant(index) { index = (index + 1) & mask }
        keys[index] = Self.key(of: entry.path)
        slots[index] = entry
    }

    /// Empties slot `index` and moves back the entries after it that probed past it, so that
    /// every lookup still reaches its entry before an empty slot (no tombstones).
    private mutating func removeEntry(at index: Int) {
        slots[index] = nil
        keys[index] = 0
        count -= 1
        var hole = index
        var next = (index + 1) & mask
        while !isVacant(next) {
            let start = home(ofKey: keys[next])
            // The entry may fill the hole when its home is not in the cyclic range (hole, next].
            let distanceToNext = (next - start) & mask
            let distanceToHole = (next - hole) & mask
            if distanceToNext >= distanceToHole {
                slots.swapAt(hole, next)
                keys.swapAt(hole, next)
                hole = next
            }
            next = (next + 1) & mask
        }
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: nil, count: old.count * 2)
        keys = Array(repeating: 0, count: old.count * 2)
        for case let entry? in old { insertNew(entry) }
    }
}
