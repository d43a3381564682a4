import LinuxSystem
import Coordination
import CoordinationRuntime

/// What the engine needs to know of a directory to name an item in it: the directory's path
/// from the mount point, and the file packages around its items. Nearly every coordinated
/// request names an item in a directory the previous one did. Working both out again walks up
/// the inode table and asks about packages once per level, a cost that grows with depth. A
/// class: handing one out is one retain.
final class DirectoryContext: Sendable {
    /// The directory itself.
    let target: AccessTarget
    /// Packages enclosing an item in the directory: the directory's, and itself when it is one.
    let packagesOfItems: [ItemPath]

    init(_ target: AccessTarget) {
        self.target = target
        packagesOfItems = target.isPackage ? target.enclosingPackages + [target.path] : target.enclosingPackages
    }
}

// @unchecked Sendable: its caches are per thread (`ThreadLocal`).
/// Each serving thread's last few directory contexts. One is good while no directory has
/// changed parent or name (`InodeTable.directoryNamesGeneration`), no package marker came or
/// went through the mount, and for as long as the package markers' own answers are (markers
/// made behind the mount's back count within that time).
final class DirectoryContexts: @unchecked Sendable {
    private struct Entry {
        var directory: NodeID
        var names: Int
        var markers: Int
        var until: Int64
        var context: DirectoryContext
    }

    /// A thread's entries: a handful, searched in order, replaced in turn.
    private struct Recent {
        var entries: [Entry] = []
        var next = 0
    }

    private static let capacity = 4
    private let recent = ThreadLocal { Recent() }

    /// The context of `directory`, remembered or made with `make`; `now` is the request's
    /// `coarseMilliseconds()`.
    func context(
        of directory: NodeID, names: Int, markers: Int, lifetime: Int64, now: Int64,
        make: () -> DirectoryContext
    ) -> DirectoryContext {
        let known = recent.withValue { mine -> (index: Int?, context: DirectoryContext?) in
            guard let index = mine.entries.firstIndex(where: { $0.directory == directory }) else { return (nil, nil) }
            let entry = mine.entries[index]
            return (index, entry.names == names && entry.markers == markers && now < entry.until ? entry.context : nil)
        }
        if let context = known.context { return context }
        let context = make()
        let entry = Entry(directory: directory, names: names, markers: markers, until: now + lifetime, context: context)
        recent.withValue { mine in
            if let index = known.index {
                mine.entries[index] = entry
            } else if mine.entries.count < Self.capacity {
                mine.entries.append(entry)
            } else {
                mine.entries[mine.next] = entry
                mine.next = (mine.next + 1) % Self.capacity
            }
        }
        return context
    }
}
