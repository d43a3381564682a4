import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import FileVersions
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where the handlers meet `MountVersions`: the store's name hidden in the root, reads noted,
/// and content kept before a rename over it, its last unlink or a truncation.
extension Filesystem {
    /// The store of the versions this mount keeps (nil: none), which its control socket's
    /// clients ask for too.
    package var versionStore: VersionStore? { versions?.store }

    /// Whether `name` in the directory `parentID` is the version store's own directory, which
    /// the mount neither shows nor lets anyone make, whatever the mount's versions are.
    @inline(__always)
    func isVersionStore(_ parentID: NodeID, _ name: String) -> Bool {
        parentID == InodeTable.rootID && name == VersionStore.directoryName
    }

    /// The process `caller` is, as versions know writers: by its process, not its thread.
    func versionWriter(_ caller: RequestCaller) -> MountVersions.Writer? {
        guard let versions else { return nil }
        return versions.writer(pid: coordinator.callingProcess(caller, now: coarseMilliseconds()) ?? 0, uid: caller.uid)
    }

    /// Who `caller` counts as among readers.
    func versionReader(_ caller: RequestCaller) -> Int64? {
        versions?.reader(pid: coordinator.callingProcess(caller, now: coarseMilliseconds()) ?? 0, uid: caller.uid)
    }

    /// An open that reads the file `fd` of `inode` by `caller`: what it saw, for its later writes.
    /// A file renamed over or removed since the kernel looked it up is no longer at its path
    /// in the inode table, but its version knows where it was: the reader read that item's
    /// older content, and its next write there is stale (else it would count as blind).
    func noteRead(_ inode: Inode, _ fd: Int32, by caller: RequestCaller) {
        guard let versions else { return }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return }
        let item =
            info.st_nlink == 1
            ? versions.store.item(holding: info) ?? targets.relativePath(inode) : targets.relativePath(inode)
        guard versions.policy(of: item) != .off, let reader = versionReader(caller) else { return }
        versions.saw(item, info, by: reader)
    }

    /// A writer's open of `inode` that changed it ends, the file left as `info`: a change of its
    /// content, which the writer has seen.
    func noteWritten(_ inode: Inode, _ info: stat, by reader: Int64?) {
        guard let versions else { return }
        let item = targets.relativePath(inode)
        versions.changed(item)
        if let reader { versions.saw(item, info, by: reader) }
    }

    /// Before `inode`'s content is truncated by `caller` (an O_TRUNC open, a truncation to
    /// `size`): a copy kept as a version, or ESTALE for a stale write under `refuse`. `inodeFD`
    /// is the inode's descriptor.
    func keepBeforeTruncating(_ inode: Inode, _ inodeFD: Int32, to size: off_t = 0, by caller: RequestCaller) -> Errno?
    {
        guard versions != nil else { return nil }
        return keepBeforeTruncating(item: targets.relativePath(inode), inodeFD, to: size, by: caller)
    }

    /// The same for an existing file a create opens with O_TRUNC: `name` in `parentFD`.
    func keepBeforeTruncating(_ name: String, in parentFD: Int32, item: String, by caller: RequestCaller) -> Errno? {
        guard versions != nil else { return nil }
        let fd = FileSystemName.withCString(name) { openat(parentFD, $0, CFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return keepBeforeTruncating(item: item, fd, to: 0, by: caller)
    }

    private func keepBeforeTruncating(
        item: String, _ inodeFD: Int32, to size: off_t, by caller: RequestCaller
    ) -> Errno? {
        guard let versions, let writer = versionWriter(caller) else { return nil }
        var info = stat()
        guard fstat(inodeFD, &info) == 0, info.st_size > size else { return nil }
        switch versions.replacement(of: item, info, by: writer) {
        case .refused: return .staleNFSFileHandle
        case .notVersioned:
            // The truncation comes next: a change of the content, whoever read it before
            // (`replacement` counts those it keeps).
            versions.changed(item)
        case .keep(let conflict):
            if let record = versions.keep(
                .copy(inodeFD), item: item, info, cause: .truncated, conflict: conflict, by: writer),
                record.conflict
            {
                tellConflict(record, by: caller)
            }
        }
        return nil
    }

    /// Before the file `name` in `parentFD` (the item `item`, as `info`) is replaced by a rename
    /// over it, or removed: its inode linked into the store where this is its last name (a
    /// copy where the file keeps other names: its content is not lost, but a stale write over it
    /// is still a conflict). The version kept, if any, to take back should the rename or unlink
    /// fail; or ESTALE for a stale rename under `refuse` (a removal is never refused).
    /// `writer`: the caller as versions know it, where the handler has it already.
    func keepBeforeReplacing(
        _ name: String, in parentFD: Int32, item: String, _ info: stat, deleting: Bool,
        by caller: RequestCaller, as writer: MountVersions.Writer? = nil
    ) -> Result<VersionRecord?, Errno> {
        guard let versions, let writer = writer ?? versionWriter(caller) else { return .success(nil) }
        let lastName = info.st_nlink == 1
        // A file another process still writes (past the break or settle time): its writes from
        // now on land in this inode, which only the version keeps.
        let node = inodes.node(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let beingWritten =
            lastName
            && node.map { node in
                node.writers.load(ordering: .acquiring) >> 32 != 0 && !node.isWritten(onlyBy: writer.pid)
            } ?? false
        switch versions.replacement(of: item, info, by: writer, beingWritten: beingWritten, deleting: deleting) {
        case .notVersioned: return .success(nil)
        case .refused: return .failure(.staleNFSFileHandle)
        case .keep(let conflict) where lastName:
            return .success(
                versions.keep(
                    .name(name, in: parentFD), item: item, info, cause: deleting ? .deleted : .replaced,
                    conflict: conflict, by: writer))
        case .keep(let conflict):
            guard conflict else { return .success(nil) }
            let fd = FileSystemName.withCString(name) { openat(parentFD, $0, CFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else { return .success(nil) }
            defer { close(fd) }
            return .success(
                versions.keep(
                    .copy(fd), item: item, info, cause: deleting ? .deleted : .replaced,
                    conflict: true, by: writer))
        }
    }

    /// ESTALE for an open for writing of a file whose only name left is the store's: it was
    /// renamed over or removed after the kernel looked it up and before this open came (the
    /// open names the inode, not the path). Written, it would change a version, and the writer's
    /// work would be lost with no word. The kernel looks the name up again once on ESTALE and
    /// opens what is there now.
    func refusingReplaced(_ inodeFD: Int32) -> Errno? {
        guard let versions else { return nil }
        var info = stat()
        guard fstat(inodeFD, &info) == 0, info.st_nlink == 1, info.st_mode & S_IFMT == S_IFREG,
            versions.store.holdsLink(to: info)
        else { return nil }
        return .staleNFSFileHandle
    }

    /// A version kept for a rename or unlink that then failed: taken back at once (its link
    /// would otherwise count as a second name of the file for the next request).
    func takeBack(_ version: VersionRecord?) {
        if let version { versions?.store.remove(version.id, now: true) }
    }

    /// A conflict version was kept by `caller`'s write: the item's presenters hear of it (a
    /// CONFLICT event whose cookie is the version), and those of the directories around it.
    /// Told from a queue of its own, in order: the request may be passing the engine's quiet
    /// gate, which the engine waits to see empty before it looks at its presenters.
    func tellConflict(_ record: VersionRecord, by caller: RequestCaller) {
        guard let versions else { return }
        let item = targets.target(mountRoot.appending(record.item), isDirectory: false)
        let writer = coordinator.callingProcess(caller, now: coarseMilliseconds()).map {
            CoordinatorIdentity.process($0)
        }
        versions.telling.async { [domain, engine] in
            domain.deliver(engine.versionNews(.gainedConflict, version: record.id, of: item, by: writer))
        }
    }
}
