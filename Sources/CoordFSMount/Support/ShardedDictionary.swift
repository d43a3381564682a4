/// A dictionary kept in 64 shards, so that it grows a sixty-fourth at a time.
///
/// A Swift dictionary that outgrows its storage moves every entry at once. The inode table's
/// grow under its lock, in the request that adds the entry, which would hold up the table while
/// they all move. In shards, each growth moves about a sixty-fourth of the entries.
struct ShardedDictionary<Key: ShardedKey, Value> {
    private var shards = [[Key: Value]](repeating: [:], count: 64)

    subscript(key: Key) -> Value? {
        get { shards[key.shard][key] }
        set { shards[key.shard][key] = newValue }
    }

    var count: Int { shards.reduce(0) { $0 + $1.count } }

    var values: [Value] { shards.flatMap(\.values) }
}

/// A key that says which of 64 shards it goes to.
protocol ShardedKey: Hashable {
    /// 0..<64, spread evenly over the keys that occur.
    var shard: Int { get }
}

extension ShardedKey {
    /// The top six bits of `value` times the golden ratio: consecutive or strided numbers
    /// (node ids, inode numbers) land in different shards.
    static func shard(of value: UInt64) -> Int { Int(truncatingIfNeeded: (value &* 0x9E37_79B9_7F4A_7C15) >> 58) }
}

extension UInt64: ShardedKey {
    var shard: Int { Self.shard(of: self) }
}
