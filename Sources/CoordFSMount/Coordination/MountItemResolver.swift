import LinuxSystem
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Control-socket paths of a mount: absolute paths under the mount point, mapped to the backing
/// directory for their facts and permissions. Paths are taken lexically (clients resolve
/// symbolic links, as `realpath` does, before sending).
struct MountItemResolver: ItemResolver {
    let filesystem: Filesystem

    var permissionBase: String { filesystem.configuration.backing }

    func resolve(_ path: String) throws(ResolveError) -> (target: AccessTarget, realPath: String) {
        guard path.hasPrefix("/"), let item = ItemPath(path) else {
            throw ResolveError("EINVAL", "'\(path)' is not an absolute path")
        }
        let root = filesystem.mountRoot
        guard item == root || root.isAncestor(of: item) else {
            throw ResolveError("EXDEV", "'\(path)' is not inside the mount \(root)")
        }
        let relative =
            item == root
            ? ""
            : String(decoding: item.string.utf8.dropFirst(root.isRoot ? 1 : root.string.utf8.count + 1), as: UTF8.self)
        let real =
            relative.isEmpty ? filesystem.configuration.backing : filesystem.configuration.backing + "/" + relative
        var info = stat()
        let isDirectory =
            FileSystemName.withCString(real) { lstat($0, &info) } == 0 && (info.st_mode & S_IFMT) == S_IFDIR
        return (filesystem.targets.target(item, isDirectory: isDirectory), real)
    }
}

extension Filesystem {
    /// How this mount's control socket resolves the paths its clients send.
    package var itemResolver: any ItemResolver { MountItemResolver(filesystem: self) }
}
