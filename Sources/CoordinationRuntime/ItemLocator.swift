import Coordination
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Turns URLs into the engine's canonical paths and facts (the only place this module looks at
/// the file system for coordination). Symbolic links in parent directories are resolved, so one
/// item never looks like two (C26).
package struct ItemLocator: Sendable {
    /// Name extensions that make a directory a file package.
    package var packageExtensions: Set<String>
    /// A directory holding a file of this name is a file package.
    static let packageMarker = ".coordfs-package"

    /// The canonical path of `url`; with `resolvingLink`, the path of the link's target (O2).
    package func canonicalPath(of url: URL, resolvingLink: Bool = false) throws -> ItemPath {
        guard url.isFileURL else {
            throw FileCoordinationError.invalidURL("'\(url.absoluteString)' is not a file URL")
        }
        let raw = url.path
        guard raw.hasPrefix("/"), let lexical = ItemPath(raw) else {
            throw FileCoordinationError.invalidURL("'\(raw)' is not an absolute path")
        }
        if lexical.isRoot { return lexical }
        if resolvingLink, let resolved = Self.realPath(lexical.string) { return resolved }
        // Resolve the longest existing ancestor, keep the rest as spelled.
        var suffix: [Substring] = [lexical.lastComponent]
        var directory = lexical.parent!
        while true {
            if let resolved = Self.realPath(directory.string) {
                return suffix.reversed().reduce(resolved) { $0.appending($1) }
            }
            guard let up = directory.parent else { return lexical }
            suffix.append(directory.lastComponent)
            directory = up
        }
    }

    private static func realPath(_ path: String) -> ItemPath? {
        guard let resolved = FileSystemName.withCString(path, { realpath($0, nil) }) else { return nil }
        defer { free(resolved) }
        return ItemPath(FileSystemName.string(cString: resolved))
    }

    /// The engine's facts about the item at `path`.
    package func target(for path: ItemPath) -> AccessTarget {
        let isDirectory = Self.isDirectory(path)
        let isPackage = isDirectory && isPackageDirectory(path)
        var packages: [ItemPath] = []
        for ancestor in path.ancestors where !ancestor.isRoot && isPackageDirectory(ancestor) {
            packages.append(ancestor)
        }
        return AccessTarget(
            path: path, isDirectory: isDirectory, isPackage: isPackage,
            enclosingPackages: packages.reversed())
    }

    package func isPackageDirectory(_ path: ItemPath) -> Bool {
        let name = path.lastComponent
        if let dot = name.lastIndex(of: "."), packageExtensions.contains(String(name[name.index(after: dot)...])) {
            return true
        }
        return FileSystemName.withCString(path.appending(Self.packageMarker).string) { access($0, F_OK) } == 0
    }

    package static func isDirectory(_ path: ItemPath) -> Bool {
        var info = stat()
        return FileSystemName.withCString(path.string) { lstat($0, &info) } == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// What tells whether an item changed: identity, size and times (nil when it does not exist).
    package struct Fingerprint: Equatable {
        let device: UInt64, inode: UInt64, size: Int64
        let modified: timespec, changed: timespec

        package static func == (a: Fingerprint, b: Fingerprint) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
                && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
        }
    }

    package static func fingerprint(_ path: ItemPath) -> Fingerprint? {
        var info = stat()
        guard FileSystemName.withCString(path.string, { lstat($0, &info) }) == 0 else { return nil }
        return Fingerprint(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
            modified: info.st_mtim, changed: info.st_ctim)
    }

    package static func exists(_ path: ItemPath) -> Bool {
        var info = stat()
        return FileSystemName.withCString(path.string) { lstat($0, &info) } == 0
    }
}

extension ItemPath {
    package var fileURL: URL { URL(fileURLWithPath: string, isDirectory: false) }
}
