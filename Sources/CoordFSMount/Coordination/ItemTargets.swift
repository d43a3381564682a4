import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How the mount names its items to the engine: paths below the mount root, spelled from the
/// inode table, and the file packages around them. The coordinator names every request's items
/// here; the handlers, the backing watch and the version store name what they tell presenters.
final class ItemTargets: Sendable {
    let inodes: InodeTable
    /// The mount point as the engine names items: presenters see paths under it.
    let root: ItemPath
    /// `--package-extensions`: a directory with one of these is a package without a marker.
    private let packageExtensions: Set<String>
    let packageMarkers: PackageMarkers
    private let directoryContexts = DirectoryContexts()

    init(inodes: InodeTable, root: ItemPath, packageExtensions: Set<String>, packageMarkers: PackageMarkers) {
        self.inodes = inodes
        self.root = root
        self.packageExtensions = packageExtensions
        self.packageMarkers = packageMarkers
    }

    /// The path of `name` in `parent` (or of `parent` itself) below the mount root.
    func relativePath(_ parent: Inode, _ name: String? = nil) -> String {
        inodes.path(of: parent.id, appending: name)
    }

    /// Whether the name the table knows `node` by now names another item in the backing
    /// directory, or nothing: another host replaced or removed it, and this mount has not heard
    /// of it yet (the kernel may keep names it was told for a second without a backing watch;
    /// a watch of a shared store sees only this machine's changes). The root is never so.
    func nameNamesAnother(_ node: Inode) -> Bool {
        let path = inodes.path(of: node.id)
        guard !path.isEmpty else { return false }
        var info = stat()
        guard FileSystemName.withCString(path, { fstatat(inodes.rootDescriptor, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0
        else {
            let error = Errno.ofFailedCall()
            return error == .noSuchFileOrDirectory || error == .notDirectory
        }
        return UInt64(info.st_ino) != node.number || UInt64(info.st_dev) != node.device
    }

    /// Where a path of the mount's items, spelled from `/`, goes on below the mount root.
    private var relativeStart: Int { root.isRoot ? 1 : root.string.utf8.count + 1 }

    /// The engine's facts for an item of the mount: directory or not, and the packages around it.
    func target(_ path: ItemPath, isDirectory: Bool) -> AccessTarget {
        guard path != root else { return AccessTarget(path: path, isDirectory: true) }
        // Its directories below the mount root, outermost first, each spelled from the root:
        // the packages among them enclose the item.
        var packages: [ItemPath] = []
        let start = relativeStart
        let itemIsPackage = path.string.withBorrowedUTF8 { bytes -> Bool in
            let relative = UnsafeBufferPointer(rebasing: bytes[start...])
            for (offset, byte) in relative.enumerated() where byte == UInt8(ascii: "/") {
                let directory = String(decoding: UnsafeBufferPointer(rebasing: relative[..<offset]), as: UTF8.self)
                if isPackage(directory) {
                    packages.append(
                        ItemPath(
                            canonical: String(
                                decoding: UnsafeBufferPointer(rebasing: bytes[..<(start + offset)]), as: UTF8.self)))
                }
            }
            return isDirectory && isPackage(String(decoding: relative, as: UTF8.self))
        }
        return AccessTarget(path: path, isDirectory: isDirectory, isPackage: itemIsPackage, enclosingPackages: packages)
    }

    /// Whether the directory at `path`, below the mount root, is a file package.
    func isPackage(directoryAt path: ItemPath) -> Bool {
        guard path != root else { return false }
        let start = relativeStart
        return isPackage(
            path.string.withBorrowedUTF8 {
                String(decoding: UnsafeBufferPointer(rebasing: $0[start...]), as: UTF8.self)
            })
    }

    private func isPackage(_ relative: String) -> Bool {
        if !packageExtensions.isEmpty, let dot = relative.utf8.lastIndex(of: UInt8(ascii: ".")),
            packageExtensions.contains(String(relative[relative.index(after: dot)...]))
        {
            return true
        }
        return packageMarkers.isMarked(relative) {
            FileSystemName.withCString(relative + "/" + ItemLocatorMarker.name) {
                faccessat(inodes.rootDescriptor, $0, F_OK, AT_SYMLINK_NOFOLLOW)
            } == 0
        }
    }

    /// After a change of the namespace through the mount: which directories are packages may
    /// have changed when a marker or a directory came or went.
    func namespaceChanged(name: String, directory: Bool) {
        if directory || name == ItemLocatorMarker.name { packageMarkers.forgetAll() }
    }

    /// `namespaceChanged` for a rename's two names.
    func namespaceChanged(name: String, _ other: String, directory: Bool) {
        namespaceChanged(name: name, directory: directory || other == ItemLocatorMarker.name)
    }

    /// The context of directory node `directory` (the mount root included).
    func directoryContext(_ directory: NodeID, now: Int64) -> DirectoryContext {
        // Read before the context is made: a change during the making leaves it stale at once.
        let names = inodes.directoryNamesGeneration.value
        let markers = packageMarkers.currentGeneration
        return directoryContexts.context(
            of: directory, names: names, markers: markers, lifetime: packageMarkers.lifetime, now: now
        ) {
            // Canonical by construction: the kernel's names are single components, never . or ..
            DirectoryContext(
                target(ItemPath(canonical: inodes.path(of: directory, under: root.string)), isDirectory: true))
        }
    }

    /// The engine's facts for the item `wanted` names.
    func target(of wanted: ItemIntent, now: Int64) -> AccessTarget { targetAndPlace(of: wanted, now: now).0 }

    /// `target(of:now:)`, with the directory node and the name its path was spelled from
    /// (`NameGates`): the node `wanted` names an item in, or the file's parent. Nil for a
    /// directory or the root (its path is its own context's).
    func targetAndPlace(of wanted: ItemIntent, now: Int64) -> (AccessTarget, place: (directory: NodeID, name: String)?)
    {
        let directory: NodeID, name: String
        if !wanted.name.isEmpty {
            (directory, name) = (wanted.node.id, wanted.name)
        } else if wanted.node.isDirectory || wanted.node.id == InodeTable.rootID {
            return (directoryContext(wanted.node.id, now: now).target, nil)
        } else {
            // The parent and the name read together: a rename between two reads would spell
            // the path from one place and shut the gate of another.
            (directory, name) = inodes.placement(of: wanted.node)
        }
        let context = directoryContext(directory, now: now)
        let path = context.target.path.appending(name)
        // Whether a directory is itself a package is looked at per request: only directories
        // made, removed or renamed ask, and a marker's answer is remembered anyway.
        let isPackage = wanted.isDirectory && isPackage(directoryAt: path)
        return (
            AccessTarget(
                path: path, isDirectory: wanted.isDirectory, isPackage: isPackage,
                enclosingPackages: context.packagesOfItems), (directory, name)
        )
    }
}
