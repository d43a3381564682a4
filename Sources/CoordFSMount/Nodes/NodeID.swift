/// A node as the kernel names it in its requests: 1 for the mount's root; for an item on the
/// backing root's filesystem, most often its backing file handle (`StableNodeIDs`, 2^32 and
/// above), the same in every life of the mount; otherwise the number the mount gave the item
/// when it first answered a lookup of it (`InodeTable`), below 2^32. Not an inode number, nor
/// an open file's handle. Its number is for the kernel (the `Kernel` folder) and for hashing.
struct NodeID: Hashable, Sendable, CustomStringConvertible {
    let value: UInt64

    init(_ value: UInt64) { self.value = value }

    var description: String { "node \(value)" }

    /// Made from the item's backing file handle (`StableNodeIDs`), not counted.
    var isStable: Bool { value >> 32 != 0 }

    /// The generation the kernel keeps beside the id in the file handles it gives out
    /// (name_to_handle_at, an NFS export) and checks when one is opened. The root's is 0, as
    /// the kernel makes it. A stable id carries the backing's own generation, which the backing
    /// checks when the id is opened again: its generation is the same in every daemon. A
    /// counted id's is this daemon's own, drawn at random: its ids start again from 2, so a
    /// handle from an earlier life of the mount may name an id given to another item now, and
    /// must be stale rather than open that item.
    var generation: UInt64 {
        value == InodeTable.rootID.value ? 0 : isStable ? Self.stableGeneration : UInt64(Self.daemonGeneration)
    }

    private static let stableGeneration: UInt64 = 1
    private static let daemonGeneration = UInt32.random(in: 2...UInt32.max)
}

extension NodeID: ShardedKey {
    var spread: UInt64 { Self.spread(value) }
}
