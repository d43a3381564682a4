import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How long the kernel may keep what the mount tells it. Long (a day, or `--cache-timeout`) for
/// what the backing watch covers, since the mount forgets it in the kernel as it changes behind
/// the mount; `--cache-timeout` or a second for the rest.
final class KernelCacheTimes: Sendable {
    /// The device whose items the kernel may keep long: the backing directory's, once
    /// `Filesystem.watchBacking` watches it; none (`.max`) if the watch cannot cover every
    /// directory.
    private let watched = Atomic<UInt64>(.max)
    let watchedTimeout: Double
    let unwatchedTimeout: Double
    /// Files whose writes behind the mount are seen as they are made: the kernel keeps their
    /// attributes long (`attributeTimeout(for:of:readSince:)`).
    let watchedWrites: WatchedWrites

    init(cacheTimeout: Double?, statistics: MountStatistics) {
        watchedTimeout = cacheTimeout ?? 86_400
        unwatchedTimeout = cacheTimeout ?? 1
        watchedWrites = WatchedWrites(statistics: statistics)
    }

    var watchedDevice: UInt64 { watched.load(ordering: .relaxed) }

    /// The backing watch covers every directory of `device` from now on.
    func keepLong(on device: UInt64) { watched.store(device, ordering: .relaxed) }

    /// The backing watch no longer covers every directory: nothing is kept long from now on.
    func stopKeepingLong() { watched.store(.max, ordering: .relaxed) }

    /// How long the kernel may keep names and attributes of items on `device`: long on the
    /// backing directory's own filesystem while the mount watches it (what changes behind the
    /// mount is forgotten as it changes), `--cache-timeout` or a second elsewhere.
    @inline(__always)
    func timeout(onDevice device: UInt64) -> Double {
        device == watchedDevice ? watchedTimeout : unwatchedTimeout
    }

    /// How long the kernel may keep an item's attributes: a directory's as long as its name
    /// (they change only as names do, which the watch sees), and a file's whose writes behind
    /// the mount are seen as they are made (`WatchedWrites`); another file's for
    /// `--cache-timeout` or a second, since a program writing it in place behind the mount is
    /// seen only at its close; and not at all while it is open for writing through kernel
    /// passthrough (`Inode.kernelWriters`). Writes through such an open's shared mapping change
    /// the backing file's pages and times, and the kernel's FUSE inode hears nothing of them:
    /// the kernel makes itself forget size and times after a write(2), but a mapping's writes,
    /// and its msync, reach only the backing file. So `stat` asks each time, and shows them.
    /// `readSince`: `watchedWrites.readPoint` taken before `info` was read (a file marked
    /// after that may have been written just before its mark, and `info` not show it).
    @inline(__always)
    func attributeTimeout(for info: stat, of inode: Inode, readSince: UInt64) -> Double {
        if inode.kernelWriters.load(ordering: .relaxed) > 0 { return 0 }
        return info.st_mode & S_IFMT == S_IFDIR || watchedWrites.covers(inode, readSince: readSince)
            ? timeout(onDevice: UInt64(info.st_dev)) : unwatchedTimeout
    }

    /// How long the kernel may keep the attributes a create or a link answers with, which it
    /// takes whatever it was told to forget meanwhile: a short time (`--cache-timeout` or a
    /// second), and not at all while the file is open for writing through kernel passthrough
    /// (`attributeTimeout(for:of:readSince:)`).
    @inline(__always)
    func shortAttributeTimeout(of inode: Inode) -> Double {
        inode.kernelWriters.load(ordering: .relaxed) > 0 ? 0 : unwatchedTimeout
    }
}
