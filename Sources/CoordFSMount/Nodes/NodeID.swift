/// A node as the kernel names it in its requests: the number the mount gave the node's item
/// when it first answered a lookup of it (`InodeTable`), 1 for the mount's root. Not an inode
/// number, nor an open file's handle. Its number is for the kernel (the `Kernel` folder) and
/// for hashing.
struct NodeID: Hashable, Sendable, CustomStringConvertible {
    let value: UInt64

    init(_ value: UInt64) { self.value = value }

    var description: String { "node \(value)" }

    /// The generation the kernel keeps beside the id in the file handles it gives out
    /// (name_to_handle_at, an NFS export) and checks when one is opened. The root's is 0, as
    /// the kernel makes it; every other node's is this daemon's own, drawn at random: its ids
    /// start again from 2, so a handle from an earlier life of the mount may name an id given
    /// to another item now, and must be stale rather than open that item.
    var generation: UInt64 { value == InodeTable.rootID.value ? 0 : UInt64(Self.daemonGeneration) }

    private static let daemonGeneration = UInt32.random(in: 1...UInt32.max)
}

extension NodeID: ShardedKey {
    var shard: Int { Self.shard(of: value) }
}
