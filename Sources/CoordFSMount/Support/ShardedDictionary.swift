/// A hash table of number-like keys, kept in 64 shards so that it grows a sixty-fourth at a
/// time.
///
/// The inode table's maps are read and changed several times in every LOOKUP and FORGET,
/// under the table's lock. A Swift dictionary hashes each key with seeded SipHash and checks
/// that its storage is not shared before every change; these keys are numbers that one
/// multiplication spreads (`ShardedKey.spread`), and this storage is never shared (the table
/// cannot be copied). Each shard is open-addressed with linear probing; a removal moves the
/// entries after it back, so that no tombstones pile up and a miss stops at the first gap.
///
/// A Swift dictionary that outgrows its storage moves every entry at once, in the request that
/// adds the entry and under the inode table's lock, holding the table up while they all move.
/// Here only one shard grows at a time: about a sixty-fourth of the entries.
struct ShardedDictionary<Key: ShardedKey, Value>: ~Copyable {
    private let shards: UnsafeMutablePointer<Shard>
    private(set) var count = 0

    init() {
        shards = .allocate(capacity: Self.shardCount)
        // Each its own storage (`initialize(repeating:)` would share one shard's).
        for index in 0..<Self.shardCount { (shards + index).initialize(to: Shard()) }
    }

    deinit {
        for index in 0..<Self.shardCount { shards[index].free() }
        shards.deinitialize(count: Self.shardCount)
        shards.deallocate()
    }

    private static var shardCount: Int { 64 }

    subscript(key: Key) -> Value? {
        get {
            let spread = key.spread
            return shards[Self.shard(spread)].value(for: key, spread)
        }
        set {
            let spread = key.spread
            if let newValue {
                if shards[Self.shard(spread)].set(newValue, for: key, spread) { count += 1 }
            } else if shards[Self.shard(spread)].remove(key, spread) != nil {
                count -= 1
            }
        }
    }

    /// Removes `key`'s entry; its value, nil when there was none.
    @discardableResult
    mutating func removeValue(forKey key: Key) -> Value? {
        let spread = key.spread
        let removed = shards[Self.shard(spread)].remove(key, spread)
        if removed != nil { count -= 1 }
        return removed
    }

    var isEmpty: Bool { count == 0 }

    var values: [Value] {
        var values: [Value] = []
        values.reserveCapacity(count)
        for index in 0..<Self.shardCount { shards[index].forEach { values.append($1) } }
        return values
    }

    /// Every entry, in no particular order.
    func forEach(_ body: (Key, Value) -> Void) {
        for index in 0..<Self.shardCount { shards[index].forEach(body) }
    }

    /// The top six bits of a key's spread choose its shard; the bits below, its home slot.
    private static func shard(_ spread: UInt64) -> Int { Int(truncatingIfNeeded: spread >> 58) }

    /// One shard: `capacity` (a power of two) slots, each used or not; at most three quarters
    /// used, so that probes stay short. Keys, values and the used marks in arrays of their
    /// own: a probe reads only the small ones, however big the values (`DepartedNodes`'
    /// records), in as few cache lines as it can.
    private struct Shard {
        private var keys: UnsafeMutablePointer<Key>
        private var values: UnsafeMutablePointer<Value>
        private var used: UnsafeMutablePointer<Bool>
        private var capacityBits = 3
        private(set) var count = 0

        init() {
            keys = .allocate(capacity: 1 << 3)
            values = .allocate(capacity: 1 << 3)
            used = .allocate(capacity: 1 << 3)
            used.initialize(repeating: false, count: 1 << 3)
        }

        private var mask: Int { (1 << capacityBits) - 1 }

        /// The slot the probe for a key starts at: the spread's bits below the shard's six.
        private func home(_ spread: UInt64) -> Int { Int(truncatingIfNeeded: (spread << 6) >> (64 - capacityBits)) }

        /// The slot holding `key`, or nil.
        private func slot(of key: Key, _ spread: UInt64) -> Int? {
            var slot = home(spread)
            while used[slot] {
                if keys[slot] == key { return slot }
                slot = (slot + 1) & mask
            }
            return nil
        }

        func value(for key: Key, _ spread: UInt64) -> Value? {
            slot(of: key, spread).map { values[$0] }
        }

        /// Whether the key is new.
        mutating func set(_ value: Value, for key: Key, _ spread: UInt64) -> Bool {
            var slot = home(spread)
            while used[slot] {
                if keys[slot] == key {
                    values[slot] = value
                    return false
                }
                slot = (slot + 1) & mask
            }
            if (count + 1) * 4 > (mask + 1) * 3 {
                grow()
                slot = home(spread)
                while used[slot] { slot = (slot + 1) & mask }
            }
            (keys + slot).initialize(to: key)
            (values + slot).initialize(to: value)
            used[slot] = true
            count += 1
            return true
        }

        /// Removes `key`'s entry, then moves back each entry after it whose probe passed the
        /// gap, so that every entry stays reachable from its home without a gap between.
        mutating func remove(_ key: Key, _ spread: UInt64) -> Value? {
            guard var gap = slot(of: key, spread) else { return nil }
            (keys + gap).deinitialize(count: 1)
            let removed = (values + gap).move()
            used[gap] = false
            count -= 1
            var next = (gap + 1) & mask
            while used[next] {
                let start = home(keys[next].spread)
                // Whether the gap lies on the probe from `start` to `next`.
                if (gap &- start) & mask < (next &- start) & mask {
                    move(from: next, to: gap)
                    gap = next
                }
                next = (next + 1) & mask
            }
            return removed
        }

        /// Moves the entry at `source` to the unused slot `target`.
        private func move(from source: Int, to target: Int) {
            (keys + target).moveInitialize(from: keys + source, count: 1)
            (values + target).moveInitialize(from: values + source, count: 1)
            used[target] = true
            used[source] = false
        }

        private mutating func grow() {
            let (oldKeys, oldValues, oldUsed, oldCapacity) = (keys, values, used, mask + 1)
            capacityBits += 1
            keys = .allocate(capacity: mask + 1)
            values = .allocate(capacity: mask + 1)
            used = .allocate(capacity: mask + 1)
            used.initialize(repeating: false, count: mask + 1)
            for old in 0..<oldCapacity where oldUsed[old] {
                var slot = home(oldKeys[old].spread)
                while used[slot] { slot = (slot + 1) & mask }
                (keys + slot).moveInitialize(from: oldKeys + old, count: 1)
                (values + slot).moveInitialize(from: oldValues + old, count: 1)
                used[slot] = true
            }
            oldKeys.deallocate()
            oldValues.deallocate()
            oldUsed.deallocate()
        }

        func forEach(_ body: (Key, Value) -> Void) {
            for slot in 0...mask where used[slot] { body(keys[slot], values[slot]) }
        }

        /// Gives the storage back (the dictionary's `deinit`).
        func free() {
            for slot in 0...mask where used[slot] {
                (keys + slot).deinitialize(count: 1)
                (values + slot).deinitialize(count: 1)
            }
            keys.deallocate()
            values.deallocate()
            used.deallocate()
        }
    }
}

/// A key spread over a 64-bit hash by one multiplication: node ids, inode numbers.
protocol ShardedKey: Equatable {
    /// The key's bits times the golden ratio (`spread(_:)`): the top bits of the product
    /// depend on every bit of the key, so consecutive or strided numbers land far apart.
    var spread: UInt64 { get }
}

extension ShardedKey {
    static func spread(_ value: UInt64) -> UInt64 { value &* 0x9E37_79B9_7F4A_7C15 }

    /// Which of 64 parts a key falls in, for other tables sharded alike (`KernelPassthrough`).
    var shard: Int { Int(truncatingIfNeeded: spread >> 58) }
}

extension UInt64: ShardedKey {
    var spread: UInt64 { Self.spread(self) }
}
