import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import FileVersions
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// mknod, mkdir, symlink, link, unlink, rmdir, rename: each a write on the items it names,
/// held for the call (docs/mount.md).
extension Filesystem {
    /// Creates `name` in `parent` with `make`, under a write on the new item, and answers with
    /// its entry.
    /// `mode`: a regular file's, whose setuid and setgid bits the caller keeps.
    private func makeItem(
        _ reply: consuming Reply, _ parentID: NodeID, _ name: String, isDirectory: Bool, mode: mode_t = 0,
        _ make: @escaping @Sendable (Int32) throws(Errno) -> Void
    ) {
        guard let parent = inodes[parentID] else { return reply.error(ENOENT) }
        if isVersionStore(parentID, name) { return reply.error(EPERM) }
        coordinator.coordinate(
            reply, ItemIntent(kind: .writing([]), node: parent, name: name, isDirectory: isDirectory),
            forTheCall: true
        ) { [self] reply, claim in
            do {
                try CallerUmask.applying(reply.caller.umask) { () throws(Errno) in
                    try inodes.withFD(parent) { fd throws(Errno) in try make(fd) }
                }
                targets.namespaceChanged(name: name, directory: false)
                giveToCaller(reply.caller, parent: parent, name: name, mode: mode)
                if let failure = syncNames(in: parent) {
                    claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                    return reply.error(failure)
                }
                let readPoint = watchedWrites.readPoint
                let (inode, info) = try lookupNode(parent, name, justMade: true)
                claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                reply.entry(
                    inode, shown(info), timeout: timeout(onDevice: inode.device),
                    attributeTimeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
            } catch {
                claim.end(IntentOutcome(existedBefore: false, existsAfter: false))
                reply.error(error)
            }
        }
    }

    func mknod(_ reply: consuming Reply, _ parent: NodeID, _ name: String, _ mode: mode_t, _ device: dev_t) {
        makeItem(reply, parent, name, isDirectory: false, mode: mode) { parent throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { mknodat(parent, $0, mode, device) })
        }
    }

    func mkdir(_ reply: consuming Reply, _ parent: NodeID, _ name: String, _ mode: mode_t) {
        makeItem(reply, parent, name, isDirectory: true) { parent throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { mkdirat(parent, $0, mode) })
        }
    }

    func symlink(_ reply: consuming Reply, _ target: String, _ parent: NodeID, _ name: String) {
        makeItem(reply, parent, name, isDirectory: false) { parent throws(Errno) in
            _ = try check(
                FileSystemName.withCString(name) { name in
                    FileSystemName.withCString(target) { symlinkat($0, parent, name) }
                })
        }
    }

    func link(_ reply: consuming Reply, _ id: NodeID, _ parentID: NodeID, _ name: String) {
        guard let inode = inodes[id], let parent = inodes[parentID] else { return reply.error(ENOENT) }
        if isVersionStore(parentID, name) { return reply.error(EPERM) }
        coordinator.coordinate(
            reply, ItemIntent(kind: .writing([]), node: parent, name: name, isDirectory: false),
            forTheCall: true
        ) { [self] reply, claim in
            do {
                try inodes.withFD(inode) { inodeFD throws(Errno) in
                    try inodes.withFD(parent) { parentFD throws(Errno) in
                        _ = try check(
                            FileSystemName.withCString(name) {
                                linkat(AT_FDCWD, procPath(inodeFD), parentFD, $0, AT_SYMLINK_FOLLOW)
                            })
                    }
                }
                targets.namespaceChanged(name: name, directory: false)
                if let failure = syncNames(in: parent) {
                    claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                    return reply.error(failure)
                }
                let (linked, info) = try lookupNode(parent, name)
                claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                // Kept a short time: the kernel takes a link's reply whatever it was told to
                // forget meanwhile (a write behind the mount just then would be lost for long).
                // Not at all while it is written through kernel passthrough (an O_TMPFILE file
                // linked while still open): as an open's attributes.
                reply.entry(
                    linked, shown(info), timeout: timeout(onDevice: linked.device),
                    attributeTimeout: shortAttributeTimeout(of: linked))
            } catch {
                claim.end(IntentOutcome(existedBefore: false, existsAfter: false))
                reply.error(error)
            }
        }
    }

    func unlink(_ reply: consuming Reply, _ parentID: NodeID, _ name: String, directory: Bool) {
        guard let parent = inodes[parentID], !isVersionStore(parentID, name) else { return reply.error(ENOENT) }
        let caller = reply.caller
        // Programs reading the item through open files read on what they opened, as on any
        // Linux filesystem: they do not keep its directory locked (docs/mount.md, the kernel's
        // locks). A writer's work would be lost: it is waited for.
        coordinator.coordinate(
            reply,
            ItemIntent(
                kind: .writing([.forDeleting, .passesOpenReads]), node: parent, name: name, isDirectory: directory),
            forTheCall: true
        ) { reply, claim in
            let failure: Errno? = self.inodes.withFD(parent, orElse: { $0 }) { fd in
                // A file's last name: its inode goes to the store first, as a version.
                var version: VersionRecord?
                var info = stat()
                let found =
                    !directory && FileSystemName.withCString(name, { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0
                // (Empty files, most of what an rm -r of build output removes, keep nothing,
                // unless another process still writes them.)
                if found, self.versions != nil,
                    info.st_size > 0
                        || self.inodes.node(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
                            .map({ $0.writers.load(ordering: .relaxed) != 0 }) == true,
                    case .success(let kept) = self.keepBeforeReplacing(
                        name, in: fd, item: self.targets.relativePath(parent, name), info,
                        deleting: true, by: caller)
                {
                    version = kept
                }
                if !directory { self.inodes.nameGoing(name, in: parent, parentFD: fd) }
                let held = found && version == nil ? self.inodes.holdForUnlink(name, info, parentFD: fd) : nil
                let failure = FileSystemName.withCString(name) { unlinkat(fd, $0, directory ? AT_REMOVEDIR : 0) }
                    .failure
                if let held { self.inodes.closeLater(held) }
                if failure != nil { self.takeBack(version) }
                if failure == nil, let version, version.conflict { self.tellConflict(version, by: caller) }
                if failure == nil, !directory { self.versions?.changed(self.targets.relativePath(parent, name)) }
                return failure
            }
            if failure == nil {
                self.targets.namespaceChanged(name: name, directory: directory)
                claim.revokePassed()
            }
            claim.end(IntentOutcome(existedBefore: true, existsAfter: failure != nil, changed: false))
            if let failure = failure ?? self.syncNames(in: parent) { reply.error(failure) } else { reply.ok() }
        }
    }

    func rename(
        _ reply: consuming Reply, _ parentID: NodeID, _ name: String, _ newParentID: NodeID, _ newName: String,
        _ flags: UInt32
    ) {
        guard let parent = inodes[parentID], let newParent = inodes[newParentID], !isVersionStore(parentID, name) else {
            return reply.error(ENOENT)
        }
        if isVersionStore(newParentID, newName) { return reply.error(EPERM) }
        let rename: Rename
        do throws(Errno) {
            rename = try Rename(from: (parent, name), to: (newParent, newName), flags: flags, in: self)
        } catch {
            return reply.error(error)
        }
        let caller = reply.caller
        coordinator.coordinate(reply, rename.source, and: rename.destination, forTheCall: true) { [self] reply, claim in
            let (renameFailure, replaced) = renameBacking(rename, caller)
            if let failure = renameFailure {
                claim.end([
                    IntentOutcome(existedBefore: true, existsAfter: true, changed: false),
                    IntentOutcome(
                        existedBefore: rename.destinationExisted, existsAfter: rename.destinationExisted, changed: false
                    )
                ])
                return reply.error(failure)
            }
            targets.namespaceChanged(
                name: name, newName, directory: rename.sourceIsDirectory || rename.destinationIsDirectory)
            claim.revokePassed()
            if let replaced { afterReplacing(rename, replaced, caller) }
            renamedNodes(rename)
            if rename.exchange {
                // Both items changed place; told as changes of both paths.
                claim.end([
                    IntentOutcome(existedBefore: true, existsAfter: true, changed: true),
                    IntentOutcome(existedBefore: true, existsAfter: true, changed: true)
                ])
            } else {
                // The destination is now what the source was.
                claim.reportRename(sourceIsDirectory: rename.sourceIsDirectory)
                claim.end([
                    IntentOutcome(existedBefore: true, existsAfter: false, changed: true),
                    IntentOutcome(existedBefore: rename.destinationExisted, existsAfter: true, changed: true)
                ])
            }
            if let failure = syncNames(in: parent, and: newParent) { return reply.error(failure) }
            reply.ok()
        }
    }

    /// A rename as the request found its two names.
    private struct Rename: Sendable {
        let parent: Inode, name: String
        let newParent: Inode, newName: String
        let flags: UInt32
        let sourceInfo: stat
        let sourceIsDirectory: Bool
        let destinationInfo: stat
        let destinationExisted: Bool
        let destinationIsDirectory: Bool
        let exchange: Bool
        /// A file renamed over another (an atomic save) replaces its content: kept as a version.
        let mayReplace: Bool

        init(from: (Inode, String), to: (Inode, String), flags: UInt32, in filesystem: Filesystem) throws(Errno) {
            (parent, name, newParent, newName, self.flags) = (from.0, from.1, to.0, to.1, flags)
            var source = stat()
            let sourceFailure: Errno? = filesystem.inodes.withFD(from.0, orElse: { $0 }) { fd in
                FileSystemName.withCString(from.1) { fstatat(fd, $0, &source, AT_SYMLINK_NOFOLLOW) }.failure
            }
            if let sourceFailure { throw sourceFailure }
            var destination = stat()
            destinationExisted = filesystem.inodes.withFD(to.0, orElse: { _ in false }) { fd in
                FileSystemName.withCString(to.1) { fstatat(fd, $0, &destination, AT_SYMLINK_NOFOLLOW) } == 0
            }
            (sourceInfo, destinationInfo) = (source, destination)
            sourceIsDirectory = (source.st_mode & S_IFMT) == S_IFDIR
            destinationIsDirectory = destinationExisted && (destination.st_mode & S_IFMT) == S_IFDIR
            exchange = flags & UInt32(CFS_RENAME_EXCHANGE) != 0
            mayReplace = !exchange && flags & CFS_RENAME_NOREPLACE == 0 && filesystem.versions != nil
        }

        /// Both or none (C6): forMoving on the source, forReplacing on the destination (C40).
        /// Open descriptors keep their inodes: readers read on, and appenders of a moved item
        /// append on under its new name (logrotate's mv, before it asks for a reopen); their
        /// holds follow it (`State.relocateOpenFileHolds`). An appender of a replaced file would
        /// lose its work: it is waited for. An exchange, which reports no move for holds to
        /// follow, waits for them all.
        var source: ItemIntent {
            ItemIntent(
                kind: .writing(exchange ? .forMoving : [.forMoving, .passesOpenReads, .passesAppends]), node: parent,
                name: name, isDirectory: sourceIsDirectory)
        }

        var destination: ItemIntent {
            ItemIntent(
                kind: .writing(exchange ? .forMoving : [.forReplacing, .passesOpenReads]), node: newParent,
                name: newName, isDirectory: destinationIsDirectory)
        }

        /// Whether the destination was the source itself (a rename of a name onto another of its own).
        var replacedItself: Bool {
            destinationInfo.st_dev == sourceInfo.st_dev && destinationInfo.st_ino == sourceInfo.st_ino
        }
    }

    /// A file a rename replaced: its item, who replaced it, and the version kept of it (if any).
    private struct Replaced {
        var item: String
        var writer: MountVersions.Writer?
        var version: VersionRecord?
    }

    /// Renames on the backing directory; the errno if it failed, and the file it replaced, if
    /// any. The destination is looked at as it is now, once the claim is held: what it was when
    /// the request came (if anything) may have been made or written since, while it waited. Not
    /// the source itself. Its path and who replaces it are found only for a file replaced (a
    /// rename to a name that is free spells no path and asks for no session).
    private func renameBacking(_ rename: Rename, _ caller: RequestCaller) -> (Errno?, replaced: Replaced?) {
        var replaced: Replaced?
        let failure: Errno? = inodes.withFD(rename.parent, orElse: { $0 }) { fromFD in
            inodes.withFD(rename.newParent, orElse: { $0 }) { toFD in
                var now = stat()
                if rename.mayReplace,
                    FileSystemName.withCString(rename.newName, { fstatat(toFD, $0, &now, AT_SYMLINK_NOFOLLOW) }) == 0,
                    now.st_mode & S_IFMT == S_IFREG,
                    now.st_dev != rename.sourceInfo.st_dev || now.st_ino != rename.sourceInfo.st_ino
                {
                    let item = targets.relativePath(rename.newParent, rename.newName)
                    let writer = versionWriter(caller)
                    switch keepBeforeReplacing(
                        rename.newName, in: toFD, item: item, now, deleting: false, by: caller, as: writer)
                    {
                    case .success(let kept): replaced = Replaced(item: item, writer: writer, version: kept)
                    case .failure(let refusal): return refusal
                    }
                }
                let failure = FileSystemName.withCString(rename.name) { from in
                    FileSystemName.withCString(rename.newName) { to in
                        cfs_renameat2(fromFD, from, toFD, to, rename.flags)
                    }
                }.failure
                if failure != nil { takeBack(replaced?.version) }
                return failure
            }
        }
        return (failure, failure == nil ? replaced : nil)
    }

    /// After a rename over a file: a change of the item, which the writer has seen as the rename
    /// left it (its change time moved); counted already where a version was kept, as the
    /// replacement was checked (`MountVersions.replacement`). A conflict is told once the
    /// rename is done.
    private func afterReplacing(_ rename: Rename, _ replaced: Replaced, _ caller: RequestCaller) {
        guard let versions else { return }
        let item = replaced.item
        if replaced.version == nil { versions.changed(item) }
        var after = stat()
        if let reader = replaced.writer?.reader,
            inodes.withFD(
                rename.newParent, orElse: { _ in false },
                { fd in
                    FileSystemName.withCString(rename.newName) { fstatat(fd, $0, &after, AT_SYMLINK_NOFOLLOW) } == 0
                })
        {
            versions.saw(item, after, by: reader)
        }
        if let version = replaced.version, version.conflict { tellConflict(version, by: caller) }
    }

    /// The node table after a rename: the replaced name's node loses it, the moved nodes take
    /// their new places.
    private func renamedNodes(_ rename: Rename) {
        let (source, destination) = (rename.sourceInfo, rename.destinationInfo)
        if rename.destinationExisted && !rename.exchange && !rename.destinationIsDirectory && !rename.replacedItself {
            inodes.nameRemoved(
                rename.newName, in: rename.newParent.id, device: UInt64(destination.st_dev),
                number: UInt64(destination.st_ino))
        }
        if let moved = inodes.node(device: UInt64(source.st_dev), number: UInt64(source.st_ino)) {
            inodes.moved(moved.id, from: (rename.parent.id, rename.name), to: rename.newParent.id, name: rename.newName)
        }
        if rename.exchange,
            let other = inodes.node(device: UInt64(destination.st_dev), number: UInt64(destination.st_ino))
        {
            inodes.moved(other.id, from: (rename.newParent.id, rename.newName), to: rename.parent.id, name: rename.name)
        }
    }
}
