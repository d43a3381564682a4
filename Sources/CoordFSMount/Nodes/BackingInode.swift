/// An inode of the backing filesystems, named by its device and number: what a stat says an
/// item is, whichever name reached it. Its number may go to another item once nothing holds
/// the inode (an inode table's node holds its inode through its descriptor, while it has one).
struct BackingInode: ShardedKey {
    let device: UInt64
    let number: UInt64

    var spread: UInt64 { Self.spread(number ^ device) }
}
