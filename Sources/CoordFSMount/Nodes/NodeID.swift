/// A node as the kernel names it in its requests: the number the mount gave the node's item
/// when it first answered a lookup of it (`InodeTable`), 1 for the mount's root. Not an inode
/// number, nor an open file's handle. Its number is for the kernel (the `Kernel` folder) and
/// for hashing.
struct NodeID: Hashable, Sendable, CustomStringConvertible {
    let value: UInt64

    init(_ value: UInt64) { self.value = value }

    var description: String { "node \(value)" }
}

extension NodeID: ShardedKey {
    var shard: Int { Self.shard(of: value) }
}
