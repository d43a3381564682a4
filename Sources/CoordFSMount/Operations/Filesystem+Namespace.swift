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
    private func makeItem(_ reply: consuming Reply, _ parentID: UInt64, _ name: String, isDirectory: Bool, mode: mode_t = 0,
                          _ make: @escaping @Sendable (Int32) throws(Errno) -> Void) {
        guard let parent = inodes[parentID] else { return reply.error(ENOENT) }
        if isVersionStore(parentID, name) { return reply.error(EPERM) }
        coordinator.coordinate(reply, ItemIntent(kind: .writing([]), node: parent, name: name, isDirectory: isDirectory),
                   forTheCall: true) { [self] reply, claim in
            do {
                try CallerUmask.applying(reply.caller.umask) { () throws(Errno) in try inodes.withFD(parent) { fd throws(Errno) in try make(fd) } }
                targets.namespaceChanged(name: name, directory: false)
                giveToCaller(reply.caller, parent: parent, name: name, mode: mode)
                if let failure = syncNames(in: parent) {
                    claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                    return reply.error(failure)
                }
                let readPoint = watchedWrites.readPoint
                let (inode, info) = try lookupNode(parent, name, justMade: true)
                claim.end(IntentOutcome(existedBefore: false, existsAfter: true))
                reply.entry(inode, shown(info), timeout: timeout(onDevice: inode.device),
                            attributeTimeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
            } catch {
                claim.end(IntentOutcome(existedBefore: false, existsAfter: false))
                reply.error(error)
            }
        }
    }

    func mknod(_ reply: consuming Reply, _ parent: UInt64, _ name: String, _ mode: mode_t, _ device: dev_t) {
        makeItem(reply, parent, name, isDirectory: false, mode: mode) { parent throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { mknodat(parent, $0, mode, device) })
        }
    }

    func mkdir(_ reply: consuming Reply, _ parent: UInt64, _ name: String, _ mode: mode_t) {
        makeItem(reply, parent, name, isDirectory: true) { parent throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { mkdirat(parent, $0, mode) })
        }
    }

    func symlink(_ reply: consuming Reply, _ target: String, _ parent: UInt64, _ name: String) {
        makeItem(reply, parent, name, isDirectory: false) { parent throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { name in FileSystemName.withCString(target) { symlinkat($0, parent, name) } })
        }
    }

    func link(_ reply: consuming Reply, _ id: UInt64, _ parentID: UInt64, _ name: String) {
        guard let inode = inodes[id], let parent = inodes[parentID] else { return reply.error(ENOENT) }
        if isVersionStore(parentID, name) { return reply.error(EPERM) }
        coordinator.coordinate(reply, ItemIntent(kind: .writing([]), node: parent, name: name, isDirectory: false),
                   forTheCall: true) { [self] reply, claim in
            do {
                try inodes.withFD(inode) { inodeFD throws(Errno) in
                    try inodes.withFD(parent) { parentFD throws(Errno) in
                        _ = try check(FileSystemName.withCString(name) { linkat(AT_FDCWD, procPath(inodeFD), parentFD, $0, AT_SYMLINK_FOLLOW) })
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
                reply.entry(linked, shown(info), timeout: timeout(onDevice: linked.device), attributeTimeout: unwatchedTimeout)
            } catch {
                claim.end(IntentOutcome(existedBefore: false, existsAfter: false))
                reply.error(error)
            }
        }
    }

    func unlink(_ reply: consuming Reply, _ parentID: UInt64, _ name: String, directory: Bool) {
        guard let parent = inodes[parentID], !isVersionStore(parentID, name) else { return reply.error(ENOENT) }
        let caller = reply.caller
        // Programs reading the item through open files read on what they opened, as on any
        // Linux filesystem: they do not keep its directory locked (docs/mount.md, the kernel's
        // locks). A writer's work would be lost: it is waited for.
        coordinator.coordinate(reply, ItemIntent(kind: .writing([.forDeleting, .passesOpenReads]), node: parent, name: name, isDirectory: directory),
                   forTheCall: true) { reply, claim in
            let failure: Errno? = self.inodes.withFD(parent, orElse: { $0 }) { fd in
                // A file's last name: its inode goes to the store first, as a version.
                var version: VersionRecord?
                var info = stat()
                // (Empty files, most of what an rm -r of build output removes, keep nothing,
                // unless another process still writes them.)
                if !directory, self.versions != nil,
                   FileSystemName.withCString(name, { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0,
                   info.st_size > 0 || self.inodes.node(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
                       .map({ $0.writers.load(ordering: .relaxed) != 0 }) == true,
                   case .success(let kept) = self.keepBeforeReplacing(name, in: fd, item: self.targets.relativePath(parent, name), info,
                                                                      deleting: true, by: caller) {
                    version = kept
                }
                if !directory { self.inodes.nameGoing(name, in: parent, parentFD: fd) }
                let failure = FileSystemName.withCString(name) { unlinkat(fd, $0, directory ? AT_REMOVEDIR : 0) } == -1 ? Errno.current : nil
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

    func rename(_ reply: consuming Reply, _ parentID: UInt64, _ name: String, _ newParentID: UInt64, _ newName: String, _ flags: UInt32) {
        guard let parent = inodes[parentID], let newParent = inodes[newParentID], !isVersionStore(parentID, name) else {
            return reply.error(ENOENT)
        }
        if isVersionStore(newParentID, newName) { return reply.error(EPERM) }
        let caller = reply.caller
        var sourceStat = stat()
        let sourceFailure: Errno? = inodes.withFD(parent, orElse: { $0 }) { fd in
            FileSystemName.withCString(name) { fstatat(fd, $0, &sourceStat, AT_SYMLINK_NOFOLLOW) } == -1 ? Errno.current : nil
        }
        if let sourceFailure { return reply.error(sourceFailure) }
        let sourceInfo = sourceStat
        let sourceIsDirectory = (sourceInfo.st_mode & S_IFMT) == S_IFDIR
        var destinationStat = stat()
        let destinationExisted = inodes.withFD(newParent, orElse: { _ in false }) { fd in
            FileSystemName.withCString(newName) { fstatat(fd, $0, &destinationStat, AT_SYMLINK_NOFOLLOW) } == 0
        }
        let destinationInfo = destinationStat
        let destinationIsDirectory = destinationExisted && (destinationInfo.st_mode & S_IFMT) == S_IFDIR
        let exchange = flags & UInt32(CFS_RENAME_EXCHANGE) != 0
        // Both or none (C6): forMoving on the source, forReplacing on the destination (C40).
        // Open descriptors keep their inodes: readers read on, and appenders of a moved item
        // append on under its new name (logrotate's mv, before it asks for a reopen); their
        // holds follow it (`State.relocateOpenFileHolds`). An appender of a replaced file would
        // lose its work: it is waited for. An exchange, which reports no move for holds to
        // follow, waits for them all.
        let source = ItemIntent(kind: .writing(exchange ? .forMoving : [.forMoving, .passesOpenReads, .passesAppends]),
                                node: parent, name: name, isDirectory: sourceIsDirectory)
        let destination = ItemIntent(kind: .writing(exchange ? .forMoving : [.forReplacing, .passesOpenReads]), node: newParent,
                                     name: newName, isDirectory: destinationIsDirectory)
        let replacedItself = destinationInfo.st_dev == sourceInfo.st_dev && destinationInfo.st_ino == sourceInfo.st_ino
        // A file renamed over another (an atomic save) replaces its content: kept as a version.
        let mayReplace = !exchange && flags & CFS_RENAME_NOREPLACE == 0 && versions != nil
        coordinator.coordinate(reply, source, and: destination, forTheCall: true) { [self] reply, claim in
            var version: VersionRecord?
            let destinationItem = mayReplace ? targets.relativePath(newParent, newName) : ""
            // Who replaces, found once: for the version kept and for what it then has seen.
            let writer = mayReplace ? versionWriter(caller) : nil
            var replaces = false
            let renameFailure: Errno? = inodes.withFD(parent, orElse: { $0 }) { fromFD in
                inodes.withFD(newParent, orElse: { $0 }) { toFD in
                    // The destination as it is now, once the claim is held: what it was when the
                    // request came (if anything) may have been made or written since, while it
                    // waited. Not the source itself (a rename of a name onto another of its own).
                    var replaced = stat()
                    if mayReplace, FileSystemName.withCString(newName, { fstatat(toFD, $0, &replaced, AT_SYMLINK_NOFOLLOW) }) == 0,
                       replaced.st_mode & S_IFMT == S_IFREG, replaced.st_dev != sourceInfo.st_dev || replaced.st_ino != sourceInfo.st_ino {
                        replaces = true
                        switch keepBeforeReplacing(newName, in: toFD, item: destinationItem, replaced, deleting: false, by: caller,
                                                   as: writer) {
                        case .success(let kept): version = kept
                        case .failure(let refusal): return refusal
                        }
                    }
                    let failure = FileSystemName.withCString(name) { from in FileSystemName.withCString(newName) { to in cfs_renameat2(fromFD, from, toFD, to, flags) } } == -1
                        ? Errno.current : nil
                    if failure != nil { takeBack(version) }
                    return failure
                }
            }
            if let failure = renameFailure {
                claim.end([IntentOutcome(existedBefore: true, existsAfter: true, changed: false),
                           IntentOutcome(existedBefore: destinationExisted, existsAfter: destinationExisted, changed: false)])
                return reply.error(failure)
            }
            targets.namespaceChanged(name: name, newName, directory: sourceIsDirectory || destinationIsDirectory)
            claim.revokePassed()
            if replaces, let versions {
                // A change of the item, which the writer has seen as the rename left it (its
                // change time moved); a conflict is told once the rename is done.
                versions.changed(destinationItem)
                var after = stat()
                if let reader = writer?.reader, inodes.withFD(newParent, orElse: { _ in false }, { fd in
                    FileSystemName.withCString(newName) { fstatat(fd, $0, &after, AT_SYMLINK_NOFOLLOW) } == 0
                }) {
                    versions.saw(destinationItem, after, by: reader)
                }
                if let version, version.conflict { tellConflict(version, by: caller) }
            }
            if destinationExisted && !exchange && !destinationIsDirectory && !replacedItself {
                inodes.nameRemoved(newName, in: newParent.id, device: UInt64(destinationInfo.st_dev),
                                   number: UInt64(destinationInfo.st_ino))
            }
            if let moved = inodes.node(device: UInt64(sourceInfo.st_dev), number: UInt64(sourceInfo.st_ino)) {
                inodes.moved(moved.id, from: (parent.id, name), to: newParent.id, name: newName)
            }
            if exchange {
                if let other = inodes.node(device: UInt64(destinationInfo.st_dev), number: UInt64(destinationInfo.st_ino)) {
                    inodes.moved(other.id, from: (newParent.id, newName), to: parent.id, name: name)
                }
                // Both items changed place; told as changes of both paths.
                claim.end([IntentOutcome(existedBefore: true, existsAfter: true, changed: true),
                           IntentOutcome(existedBefore: true, existsAfter: true, changed: true)])
            } else {
                // The destination is now what the source was.
                claim.reportRename(sourceIsDirectory: sourceIsDirectory)
                claim.end([IntentOutcome(existedBefore: true, existsAfter: false, changed: true),
                           IntentOutcome(existedBefore: destinationExisted, existsAfter: true, changed: true)])
            }
            if let failure = syncNames(in: parent, and: newParent) { return reply.error(failure) }
            reply.ok()
        }
    }
}
