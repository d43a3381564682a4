import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How the mount names its items to the engine: paths below the mount root, and the file
/// packages around them.
extension Filesystem {
    /// The path of `name` in `parent` (or of `parent` itself) below the mount root.
    func relativePath(_ parent: Inode, _ name: String? = nil) -> String {
        inodes.path(of: parent.id, appending: name)
    }

    /// Where a path of the mount's items, spelled from `/`, goes on below the mount root.
    private var relativeStart: Int { mountRoot.isRoot ? 1 : mountRoot.string.utf8.count + 1 }

    /// The engine's facts for an item of the mount: directory or not, and the packages around it.
    func target(_ path: ItemPath, isDirectory: Bool) -> AccessTarget {
        guard path != mountRoot else { return AccessTarget(path: path, isDirectory: true) }
        // Its directories below the mount root, outermost first, each spelled from the root:
        // the packages among them enclose the item.
        var packages: [ItemPath] = []
        let start = relativeStart
        let itemIsPackage = path.string.withBorrowedUTF8 { bytes -> Bool in
            let relative = UnsafeBufferPointer(rebasing: bytes[start...])
            for (offset, byte) in relative.enumerated() where byte == UInt8(ascii: "/") {
                let directory = String(decoding: UnsafeBufferPointer(rebasing: relative[..<offset]), as: UTF8.self)
                if isPackage(directory) {
                    packages.append(ItemPath(canonical: String(decoding: UnsafeBufferPointer(rebasing: bytes[..<(start + offset)]), as: UTF8.self)))
                }
            }
            return isDirectory && isPackage(String(decoding: relative, as: UTF8.self))
        }
        return AccessTarget(path: path, isDirectory: isDirectory, isPackage: itemIsPackage, enclosingPackages: packages)
    }

    /// Whether the directory at `path`, below the mount root, is a file package.
    func isPackage(directoryAt path: ItemPath) -> Bool {
        guard path != mountRoot else { return false }
        let start = relativeStart
        return isPackage(path.string.withBorrowedUTF8 { String(decoding: UnsafeBufferPointer(rebasing: $0[start...]), as: UTF8.self) })
    }

    private func isPackage(_ relative: String) -> Bool {
        if !configuration.packageExtensions.isEmpty, let dot = relative.utf8.lastIndex(of: UInt8(ascii: ".")),
           configuration.packageExtensions.contains(String(relative[relative.index(after: dot)...])) {
            return true
        }
        return packageMarkers.isMarked(relative) {
            FileSystemName.withCString(relative + "/" + ItemLocatorMarker.name) { faccessat(inodes.rootDescriptor, $0, F_OK, AT_SYMLINK_NOFOLLOW) } == 0
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
}
