import CFuse3
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A node the kernel knows: an O_PATH descriptor of the backing item, the kernel's lookup count,
/// and the parent and name it was last reached by (the path coordination uses; renames made
/// through the mount keep it right).
final class Inode: @unchecked Sendable {
    let id: UInt64
    let device: UInt64
    let number: UInt64
    let fd: Int32
    let isDirectory: Bool
    // Guarded by the table's lock.
    var lookups: UInt64 = 0
    var parent: UInt64
    var name: String
    /// Size, mtime and ctime when the last open of it ended: if they are the same at the next
    /// open, nothing changed behind the mount's back and the kernel may keep its page cache.
    var lastSeen: (size: Int64, mtime: timespec, ctime: timespec)?
    /// Known to have no `security.capability`: the kernel asks before every write, and every
    /// change of it goes through the mount (fuse-measurements.md, finding 2).
    let hasNoCapability = Atomic<Bool>(false)

    init(id: UInt64, device: UInt64, number: UInt64, fd: Int32, isDirectory: Bool, parent: UInt64, name: String) {
        self.id = id
        self.device = device
        self.number = number
        self.fd = fd
        self.isDirectory = isDirectory
        self.parent = parent
        self.name = name
    }
}

/// Inodes by node id and by (device, inode number). Node ids are never reused.
final class InodeTable: Sendable {
    static let rootID: UInt64 = 1

    private struct Key: Hashable { let device: UInt64, number: UInt64 }
    private struct State {
        var byID: [UInt64: Inode] = [:]
        var byKey: [Key: UInt64] = [:]
        var nextID: UInt64 = 2
    }

    private let state = Mutex(State())
    let root: Inode

    init(rootFD: Int32, rootStat: stat) {
        root = Inode(id: Self.rootID, device: UInt64(rootStat.st_dev), number: UInt64(rootStat.st_ino),
                     fd: rootFD, isDirectory: true, parent: Self.rootID, name: "")
        root.lookups = 1
        let root = self.root
        state.withLock { state in
            state.byID[Self.rootID] = root
            state.byKey[Key(device: root.device, number: root.number)] = Self.rootID
        }
    }

    subscript(id: UInt64) -> Inode? {
        if id == Self.rootID { return root }
        return state.withLock { $0.byID[id] }
    }

    /// Records a lookup of `name` in `parent` that found the item open at `fd` with `info`.
    /// Takes ownership of `fd` (closes it when the item was known already).
    func remember(fd: Int32, info: stat, parent: UInt64, name: String) -> Inode {
        let key = Key(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let (inode, duplicate) = state.withLock { state -> (Inode, Bool) in
            if let id = state.byKey[key], let known = state.byID[id] {
                known.lookups += 1
                known.parent = parent
                known.name = name
                return (known, true)
            }
            let id = state.nextID
            state.nextID += 1
            let inode = Inode(id: id, device: key.device, number: key.number, fd: fd,
                              isDirectory: (info.st_mode & S_IFMT) == S_IFDIR, parent: parent, name: name)
            inode.lookups = 1
            state.byID[id] = inode
            state.byKey[key] = id
            return (inode, false)
        }
        if duplicate { close(fd) }
        return inode
    }

    /// The kernel forgets `count` lookups; at zero the node and its descriptor go.
    func forget(_ id: UInt64, _ count: UInt64) {
        if id == Self.rootID { return }
        let gone: Inode? = state.withLock { state in
            guard let inode = state.byID[id] else { return nil }
            inode.lookups -= min(count, inode.lookups)
            guard inode.lookups == 0 else { return nil }
            state.byID[id] = nil
            state.byKey[Key(device: inode.device, number: inode.number)] = nil
            return inode
        }
        if let gone { close(gone.fd) }
    }

    /// The path of a node relative to the mount root ("" for the root).
    func relativePath(of id: UInt64) -> String {
        state.withLock { state in
            var names: [String] = []
            var current = id
            var guardCount = 0
            while current != Self.rootID, let inode = state.byID[current], guardCount < 4096 {
                names.append(inode.name)
                current = inode.parent
                guardCount += 1
            }
            return names.reversed().joined(separator: "/")
        }
    }

    /// The node now at `name` in `parent` moved there by a rename through the mount.
    func moved(_ id: UInt64, to parent: UInt64, name: String) {
        state.withLock { state in
            guard let inode = state.byID[id] else { return }
            inode.parent = parent
            inode.name = name
        }
    }

    /// The node known for (device, inode number), if any.
    func node(device: UInt64, number: UInt64) -> Inode? {
        state.withLock { state in state.byKey[Key(device: device, number: number)].flatMap { state.byID[$0] } }
    }

    func updateLastSeen(_ inode: Inode, _ info: stat?) {
        state.withLock { _ in
            inode.lastSeen = info.map { (Int64($0.st_size), $0.st_mtim, $0.st_ctim) }
        }
    }

    func lastSeen(_ inode: Inode) -> (size: Int64, mtime: timespec, ctime: timespec)? {
        state.withLock { _ in inode.lastSeen }
    }

    var count: Int { state.withLock { $0.byID.count } }
}
