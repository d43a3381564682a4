import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// open, create, read, write, flush, release, fsync, fallocate, copy_file_range, lseek. An open
/// holds its intent — read for read-only, write for writable — until the last release.
extension Filesystem {
    func open(_ reply: consuming Reply, _ id: NodeID, _ request: OpenRequest) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        let flags = backingFlags(request.flags)
        let wanted = ItemIntent(
            kind: Self.openKind(
                flags, ofALog: inode.appenders.load(ordering: .relaxed) > 0,
                withOtherLinks: inode.hasOtherLinks.load(ordering: .relaxed)),
            node: inode, isDirectory: false)
        let caller = reply.caller
        guard files.budget.hasRoom(for: caller.uid) else { return reply.error(EMFILE) }
        coordinator.coordinate(reply, wanted, nonBlocking: flags & O_NONBLOCK != 0) { [self] reply, claim in
            // On a host of a shared store, stamped first: as it was granted.
            let shared = coordinator.sharedOpen(wanted, writes: wanted.kind.isWrite, claim: claim, caller)
            if shared?.isRefused == true {
                claim.end(IntentOutcome(existedBefore: true, existsAfter: true, changed: false))
                return reply.error(EIO)
            }
            switch openBacking(inode, flags, writes: wanted.kind.isWrite, shared: shared, caller) {
            case .failure(let failure):
                claim.end(IntentOutcome(existedBefore: true, existsAfter: true, changed: failure.truncated))
                reply.error(failure.errno)
            case .success(let backing):
                let file = openFile(backing, inode, wanted.kind, flags, created: false, claim, caller)
                if flags & O_TRUNC != 0 { file.written.store(true, ordering: .relaxed) }
                file.cover = shared?.cover
                if versions != nil {
                    if flags & O_ACCMODE != O_WRONLY { noteRead(inode, backing.fd, by: caller) }
                    if wanted.kind.isWrite { file.versionReader = versionReader(caller) }
                }
                // Its writes are the mount's now, each reported if it stayed marked. The kernel
                // forgets the attributes it kept (long if marked, else a short time), and keeps
                // none until the last such open ends: a write through a shared mapping changes
                // the file's times unseen (`KernelCacheTimes.attributeTimeout`). Told before the
                // reply: a GETATTR answered meanwhile with the times before is not kept.
                if file.writesThroughTheKernel {
                    _ = watchedWrites.unwatch(inode, fd: backing.fd)
                    invalidateAttributes(of: inode)
                }
                let handle = files.insert(file, in: backing.place)
                if case .backed(let id) = backing.mode {
                    // Already served from a backing file: the bits go now instead of at the first write.
                    if backing.keepsBits { dropPrivilegeBits(backing.fd, of: inode, clearedFor: caller) }
                    return reply.open(request.info, handle: handle, backingID: id, noFlush: sendsNoFlush(inode))
                }
                let keepCache = !backing.direct && unchangedSinceLastOpen(inode, backing.fd)
                // On a host of a shared store, a file changed since it was last open here may
                // have been written by another host while this one's kernel kept its size: a
                // read stops there. What the backing watch tells of it may come after the read.
                if !keepCache && shared != nil { invalidateAttributes(of: inode) }
                reply.open(
                    request.info, handle: handle, keepCache: keepCache, directIO: backing.direct,
                    noFlush: sendsNoFlush(inode))
            }
        }
    }

    /// A place for one more open of `user` in the budget (`OpenFileBudget.take`), and the inode
    /// table's descriptors the open files now need given up.
    func placeForOpen(of user: UInt32) -> OpenFileBudget.Place? {
        guard let place = files.budget.take(for: user) else { return nil }
        inodes.keepWithinBudget()
        return place
    }

    /// A backing file opened for an open or a create, with its place in its user's share.
    private struct OpenedBacking {
        var fd: Int32
        var place: OpenFileBudget.Place
        var mode: KernelPassthrough.Mode
        /// Served as the kernel's direct_io (O_DIRECT without passthrough).
        var direct: Bool
        /// Writes by the caller must clear setuid or setgid, which the kernel would keep.
        var keepsBits = false
        /// A create that made the file itself (and may take it back).
        var made = false
    }

    /// Why an open or a create failed: whether an open had truncated the file by then, whether
    /// a create left a file (made behind the mount, or not taken back).
    private struct OpenFailure: Error {
        var errno: Errno
        var truncated = false
        var leftFile = false
    }

    /// Opens the backing file for an open of `inode` with `flags`: its place first (refused
    /// after the backing open, an O_TRUNC open would have emptied the file for nothing), then
    /// the file, kept as a version first if the open truncates it (or refused as a stale write).
    /// Opened from its handle or its descriptor's /proc path (`InodeTable.openItem`). O_DIRECT becomes
    /// the kernel's direct_io: the mount's buffers are not aligned for an O_DIRECT backing file.
    private func openBacking(
        _ inode: Inode, _ flags: Int32, writes: Bool, shared: MountCoordinator.SharedOpen?,
        _ caller: RequestCaller
    ) -> Result<OpenedBacking, OpenFailure> {
        guard let place = placeForOpen(of: caller.uid) else {
            return .failure(OpenFailure(errno: Errno(code: EMFILE)))
        }
        let backingFlags = (flags & ~O_NOFOLLOW & ~O_CREAT & ~CFS_O_DIRECT) | O_CLOEXEC
        func openTheFile() -> Result<Int32, Errno> {
            accessTimes.open(backingFlags) { flags in inodes.openItem(of: inode, flags: flags) }
        }
        let opened: Result<Int32, Errno>
        if versions != nil && (writes || flags & O_TRUNC != 0) {
            // Looked at before it is opened: a stale write is refused, a truncated file kept first.
            opened = inodes.withFD(inode, orElse: { .failure($0) }) { inodeFD in
                if writes, let refusal = refusingReplaced(inodeFD) { return .failure(refusal) }
                if flags & O_TRUNC != 0, let refusal = keepBeforeTruncating(inode, inodeFD, by: caller) {
                    return .failure(refusal)
                }
                return openTheFile()
            }
        } else {
            opened = openTheFile()
        }
        let fd: Int32
        switch opened {
        case .success(let opened): fd = opened
        case .failure(let failure):
            files.budget.giveBack(place)
            return .failure(OpenFailure(errno: failure))
        }
        func giveUp(_ failure: Errno) -> Result<OpenedBacking, OpenFailure> {
            files.budget.giveBack(place)
            close(fd)
            return .failure(OpenFailure(errno: failure, truncated: flags & O_TRUNC != 0))
        }
        let unprivileged = !caller.mayKeepPrivilegeBits
        if flags & O_TRUNC != 0 && unprivileged { dropPrivilegeBits(fd, of: inode, clearedFor: caller) }
        if flags & O_TRUNC != 0, let failure = syncData(of: fd) { return giveUp(failure) }
        // Writes that clear bits must reach the mount: the kernel writes a backing file with
        // the daemon's rights (CAP_FSETID), which keep them (`privilegeBits`).
        let keepsBits = writes && unprivileged && hasPrivilegeBits(fd, clearedFor: caller)
        let mode = beginPassthrough(
            inode, fd, prefersCached: keepsBits || !coordinator.mayPassThrough(shared))
        return .success(
            OpenedBacking(
                fd: fd, place: place, mode: mode, direct: mode == .cached && flags & CFS_O_DIRECT != 0,
                keepsBits: keepsBits))
    }

    /// The open file of an open or a create, keeping `claim` until its release. An open that
    /// went ahead by a break (`WaitWatch`) holds nothing: until its release it covers its
    /// process's next calls on the item (`BrokenOpens`), which would otherwise wait the break
    /// time again for the holders it already went past (root's SQLite opens a file, then
    /// fchowns it).
    private func openFile(
        _ backing: OpenedBacking, _ inode: Inode, _ kind: AccessKind, _ flags: Int32, created: Bool,
        _ claim: consuming MountClaim, _ caller: RequestCaller
    ) -> OpenFile {
        let writes = kind.isWrite
        let wentAhead = claim.wentAheadByBreak
        let file = OpenFile(
            fd: backing.fd, inode: inode, created: created, passthrough: backing.mode != .cached, writes: writes,
            writer: writes ? writer(of: claim, caller) : 0, opener: writes ? openingProcess(caller) : 0,
            directIO: backing.direct, flags: flags, appends: kind == .writing(.appendingOnly) && claim.holds,
            claim: claim.keptOpen())
        if let intent = wentAhead, let process = coordinator.callingProcess(caller, now: coarseMilliseconds()) {
            file.brokenOpen = (process, coordinator.brokenOpens.add(process, intent.path, writes: intent.kind.isWrite))
        }
        return file
    }

    /// The kernel-passthrough mode of a new open of `inode`, open at `fd` (cached without
    /// passthrough): the first open's descriptor is registered as the backing file
    /// (`KernelPassthrough.beginOpen`).
    private func beginPassthrough(_ inode: Inode, _ fd: Int32, prefersCached: Bool = false) -> KernelPassthrough.Mode {
        passthrough?.beginOpen(of: inode.id, on: inode.device, fd: fd, prefersCached: prefersCached) ?? .cached
    }

    /// With the writeback cache the kernel reads pages it writes partly and appends by itself:
    /// write-only opens become read-write, and O_APPEND is the kernel's.
    private func backingFlags(_ flags: Int32) -> Int32 {
        guard configuration.writebackCache else { return flags }
        var flags = flags & ~O_APPEND
        if flags & O_ACCMODE == O_WRONLY { flags = (flags & ~O_ACCMODE) | O_RDWR }
        return flags
    }

    /// True when the backing file is as the mount last left it: the kernel's cached pages are
    /// still right (docs/decisions.md, page cache).
    private func unchangedSinceLastOpen(_ inode: Inode, _ fd: Int32) -> Bool {
        guard !configuration.writebackCache, let seen = inodes.lastSeen(inode) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return seen.size == Int64(info.st_size) && seen.mtime.tv_sec == info.st_mtim.tv_sec
            && seen.mtime.tv_nsec == info.st_mtim.tv_nsec && seen.ctime.tv_sec == info.st_ctim.tv_sec
            && seen.ctime.tv_nsec == info.st_ctim.tv_nsec
    }

    /// The intent an open with `flags` holds: a read of what it opened (which a name change
    /// leaves to it: `WritingOptions.passesOpenReads`), an appending write (U1), a write in
    /// place among sharing writers (U2), or a write that truncates and excludes everyone.
    /// `ofALog`: the file has appending opens (`Inode.appenders`); an open for writing in place
    /// of it is its rotation (logrotate's copytruncate opens it read-write, copies it and
    /// truncates it through that open), which its readers do not hold off: they read a prefix
    /// already (U1). `withOtherLinks`: a file with hard links (`Inode.hasOtherLinks`), whose
    /// readers a name change waits for, as it does a coordinated reader's.
    static func openKind(_ flags: Int32, ofALog: Bool = false, withOtherLinks: Bool = false) -> AccessKind {
        let writes = flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0
        guard writes else { return .reading(withOtherLinks ? [] : .throughOpenFile) }
        let kind = createKind(flags)
        return ofALog && kind == .writing(.sharingWriters) ? .writing([.sharingWriters, .passesOpenReads]) : kind
    }

    /// A log's rotation in one call (a truncation of a file with appending opens): its appenders
    /// and its readers go on as they were (`LockKind.leavesUntouched`).
    static let logRotation: WritingOptions = [.passesOpenReads, .passesAppends]

    /// The intent a create with `flags` holds on the new file, for as long as it stays open: a
    /// write, whatever the access mode (it makes the item), of the kind an open of the file with
    /// those flags holds. A file made read-write and kept open is a writer in place like one
    /// opened so (U2): SQLite's `-wal` and `-shm`, which the first connection makes with
    /// O_RDWR|O_CREAT and keeps, are opened by the next connections while it still has them.
    static func createKind(_ flags: Int32) -> AccessKind {
        if flags & O_TRUNC != 0 { return .writing([]) }
        return .writing(flags & O_APPEND != 0 ? .appendingOnly : .sharingWriters)
    }

    func create(_ reply: consuming Reply, _ parentID: NodeID, _ name: String, _ mode: mode_t, _ request: OpenRequest) {
        guard let parent = inodes[parentID] else { return reply.error(ENOENT) }
        if isVersionStore(parentID, name) { return reply.error(EPERM) }
        if name == "/" { return tmpfile(reply, parent, mode, request) }
        let flags = backingFlags(request.flags)
        // A write on the new item; it stays held as the open's intent: an appending one for an
        // O_APPEND open (a log a program creates is readable while it appends, U1), one that
        // excludes everyone for O_TRUNC, else a write in place (`createKind`).
        let kind = Self.createKind(flags)
        let caller = reply.caller
        guard files.budget.hasRoom(for: caller.uid) else { return reply.error(EMFILE) }
        let wanted = ItemIntent(kind: kind, node: parent, name: name, isDirectory: false)
        coordinator.coordinate(reply, wanted, nonBlocking: flags & O_NONBLOCK != 0) { [self] reply, claim in
            // On a host of a shared store, stamped first: as it was granted.
            let shared = coordinator.sharedOpen(wanted, writes: true, claim: claim, caller)
            if shared?.isRefused == true {
                claim.end(IntentOutcome(existedBefore: false, existsAfter: false))
                return reply.error(EIO)
            }
            switch createBacking(name, in: parent, flags, mode, shared: shared, caller) {
            case .failure(let failure):
                claim.end(IntentOutcome(existedBefore: false, existsAfter: failure.leftFile))
                reply.error(failure.errno)
            case .success(let (backing, inode, attributes)):
                let file = openFile(backing, inode, kind, flags, created: true, claim, caller)
                file.versionReader = versionReader(caller)
                file.cover = shared?.cover
                // A file that was there already, marked: as an open's. (A create's reply, which
                // the kernel takes whatever it was told to forget meanwhile, is kept a short
                // time: open for writing, the file is not marked anyway.) Kept even while written
                // through kernel passthrough, unlike an open's, which its GETATTRs then are not:
                // a stat of what a build or an unpack has just made is served by the kernel (seven
                // times as fast), and times changed through a mapping of the new file show after
                // that short time at the latest.
                if file.writesThroughTheKernel { _ = watchedWrites.unwatch(inode, fd: backing.fd) }
                let handle = files.insert(file, in: backing.place)
                let backingID: Int32? = if case .backed(let id) = backing.mode { id } else { nil }
                reply.create(
                    inode, shown(attributes), timeout: timeout(onDevice: inode.device),
                    attributeTimeout: unwatchedTimeout,
                    request.info, handle: handle, directIO: backing.direct, backingID: backingID,
                    noFlush: sendsNoFlush(inode))
            }
        }
    }

    /// Creates (or opens, when it is there already) `name` in `parent` for a create: its place
    /// first (refused after the open, a file made behind the mount and opened with O_TRUNC
    /// would have been emptied for nothing), then the file, then its node. With passthrough
    /// its descriptor is the backing file registered for it (`beginPassthrough`). Made exclusively,
    /// so that a failure after it can take back a file this create made (and only such a
    /// file): one made behind the mount meanwhile is opened as it is.
    private func createBacking(
        _ name: String, in parent: Inode, _ flags: Int32, _ mode: mode_t,
        shared: MountCoordinator.SharedOpen?,
        _ caller: RequestCaller
    ) -> Result<(OpenedBacking, Inode, stat), OpenFailure> {
        guard let place = placeForOpen(of: caller.uid) else {
            return .failure(OpenFailure(errno: Errno(code: EMFILE)))
        }
        let (fd, createFailure, made) = inodes.withFD(parent, orElse: { (Int32(-1), $0, false) }) {
            parentFD -> (Int32, Errno?, Bool) in
            let creating = (flags | O_CREAT | O_EXCL) & ~O_NOFOLLOW & ~CFS_O_DIRECT | O_CLOEXEC
            let (fd, made, refusal) = openNew(
                name, in: parentFD, creating, mode, exclusive: flags & O_EXCL != 0, for: caller,
                item: versions == nil ? "" : targets.relativePath(parent, name))
            if let refusal { return (-1, refusal, false) }
            return (fd, fd.failure, made)
        }
        if let createFailure {
            files.budget.giveBack(place)
            return .failure(OpenFailure(errno: createFailure))
        }
        targets.namespaceChanged(name: name, directory: false)
        giveToCaller(caller, parent: parent, name: name, mode: mode)
        do throws(Errno) {
            if let failure = syncNames(in: parent) { throw failure }
            let (inode, attributes) = try lookupNode(parent, name, justMade: made)
            let mode = beginPassthrough(inode, fd, prefersCached: !coordinator.mayPassThrough(shared))
            let direct = mode == .cached && flags & CFS_O_DIRECT != 0
            return .success(
                (OpenedBacking(fd: fd, place: place, mode: mode, direct: direct, made: made), inode, attributes))
        } catch {
            files.budget.giveBack(place)
            close(fd)
            return .failure(OpenFailure(errno: error, leftFile: !takeBack(made, name, in: parent)))
        }
    }

    /// Opens `name` in `parentFD` for a create, exclusively (`flags` has O_EXCL), so that a
    /// failure after it can take back a file this create made, and only such a file: one made
    /// behind the mount meanwhile is opened as it is, unless the caller asked for O_EXCL itself.
    /// Returns the descriptor (or -1, errno set) and whether this call made the file.
    /// An existing file opened with O_TRUNC is kept as a version first (`item`, its path, spelled
    /// only then: a create of a new file takes no lock of the inode table for it), or the open
    /// refused as a stale write (the third value).
    private func openNew(
        _ name: String, in parentFD: Int32, _ flags: Int32, _ mode: mode_t, exclusive: Bool, for caller: RequestCaller,
        item: @autoclosure () -> String
    ) -> (Int32, Bool, Errno?) {
        let fd = CallerUmask.applying(caller.umask) {
            accessTimes.open(flags) { flags in
                inodes.withDescriptorRoom { FileSystemName.withCString(name) { openat(parentFD, $0, flags, mode) } }
            }
        }
        if fd >= 0 || fd.failure != .fileExists || exclusive { return (fd, fd >= 0, nil) }
        if flags & O_TRUNC != 0, let refusal = keepBeforeTruncating(name, in: parentFD, item: item(), by: caller) {
            return (-1, false, refusal)
        }
        return (
            accessTimes.open(flags & ~(O_CREAT | O_EXCL)) { flags in
                inodes.withDescriptorRoom { FileSystemName.withCString(name) { openat(parentFD, $0, flags, mode) } }
            }, false, nil
        )
    }

    /// A create that fails after making its file takes it back (`made`): one user out of
    /// descriptors left files behind that `rm -rf` then could not see. True when it is gone.
    private func takeBack(_ made: Bool, _ name: String, in parent: Inode) -> Bool {
        guard made else { return false }
        return inodes.withFD(parent, orElse: { _ in false }) { parentFD in
            FileSystemName.withCString(name) { unlinkat(parentFD, $0, 0) } == 0
        }
    }

    /// open(2) with O_TMPFILE: FUSE_TMPFILE, handed over as a create of "/" (`cfs_served_opcode`).
    /// The file has no name, so nobody else can reach it: its open takes no intent, as under
    /// `--coordination off`, and nothing is told of it. It is coordinated from its first name
    /// on, which its link (linkat through /proc/self/fd) gives it as a coordinated create.
    private func tmpfile(_ reply: consuming Reply, _ parent: Inode, _ mode: mode_t, _ request: OpenRequest) {
        let flags = backingFlags(request.flags)
        let info = request.info
        guard let place = placeForOpen(of: reply.caller.uid) else { return reply.error(EMFILE) }
        // Read-write, to serve as the backing file too, and linkable: the kernel keeps an
        // O_EXCL file from being linked itself, and the mount links through the backing file.
        let kept = flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_NOFOLLOW | CFS_O_TMPFILE | CFS_O_DIRECT)
        let fd = inodes.withFD(parent, orElse: { _ in Int32(-1) }) { parentFD in
            CallerUmask.applying(reply.caller.umask) {
                accessTimes.open(kept | O_RDWR | CFS_O_TMPFILE | O_CLOEXEC) { flags in
                    inodes.withDescriptorRoom { openat(parentFD, ".", flags, mode) }
                }
            }
        }
        if let failure = fd.failure {
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        giveToCaller(reply.caller, parent: parent) { _, uid, gid, group in
            let kept = Self.keptPrivilegeBits(
                asked: mode, made: { try? statOf(fd) }, group: group,
                callerGroup: reply.caller.gid)
            _ = fchown(fd, uid, gid)
            if let kept { _ = fchmod(fd, kept) }
        }
        var attributes = stat()
        let pathFD = Glibc.open(procPath(fd), CFS_O_PATH | O_CLOEXEC)
        guard fstat(fd, &attributes) == 0, pathFD >= 0 else {
            let failure = Errno.ofFailedCall()
            if pathFD >= 0 { close(pathFD) }
            close(fd)
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        let inode = inodes.rememberUnnamed(fd: pathFD, info: attributes, in: parent)
        let mode = beginPassthrough(inode, fd)
        let backingID: Int32? = if case .backed(let id) = mode { id } else { nil }
        let direct = backingID == nil && flags & CFS_O_DIRECT != 0
        let file = OpenFile(
            fd: fd, inode: inode, created: true, passthrough: mode != .cached, writes: true,
            opener: openingProcess(reply.caller), directIO: direct, flags: flags)
        let handle = files.insert(file, in: place)
        reply.create(
            inode, shown(attributes), timeout: timeout(onDevice: inode.device), attributeTimeout: unwatchedTimeout,
            info,
            handle: handle, directIO: direct, backingID: backingID, noFlush: sendsNoFlush(inode))
    }

    func read(_ reply: consuming Reply, _ handle: UInt64, _ size: Int, _ offset: off_t) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        guard coordinator.admitsRead(through: file) else { return reply.error(EIO) }
        reply.data(from: file.fd, offset: offset, size: size)
    }

    /// `flags`: the write's own (its open's, with O_DSYNC or O_SYNC where RWF_DSYNC, RWF_SYNC or
    /// a `sync` mount asks for them).
    func write(
        _ reply: consuming Reply, _ handle: UInt64, _ data: WriteData, _ offset: off_t,
        flags: Int32
    ) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        guard coordinator.admitsWrite(through: file) else { return reply.error(EIO) }
        dropPrivilegeBits(file.fd, of: file.inode, unlessRootCalls: reply)
        let written = data.write(to: file.fd, at: offset)
        if written < 0 { return reply.error(Int32(-written)) }
        file.written.store(true, ordering: .relaxed)
        let owed = flags & file.syncOwedToDirectWrites
        if owed != 0 {
            statistics.syncedWrites.add(1, ordering: .relaxed)
            // O_SYNC is O_DSYNC and a bit of its own: that bit asks for the metadata too.
            let synced = owed & ~O_DSYNC != 0 ? Glibc.fsync(file.fd) : fdatasync(file.fd)
            if let failure = synced.failure { return reply.error(failure) }
        }
        reply.written(written)
    }

    /// `lockOwner`: the closing process's, whose POSIX locks of the file go where the mount
    /// serves locks (close(2) of any descriptor of a file drops them).
    func flush(_ reply: consuming Reply, _ handle: UInt64, lockOwner: UInt64) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        statistics.flushes.add(1, ordering: .relaxed)
        fileLocks?.flush(file.inode.id, owner: LockOwner(lockOwner))
        // Reports errors of deferred writes to close(2), as the backing filesystem would.
        let duplicate = dup(file.fd)
        if let failure = duplicate.failure { return reply.error(failure) }
        if let failure = close(duplicate).failure { return reply.error(failure) }
        reply.ok()
    }

    /// `flockOwner`: the open's flock lock's owner, when it took one; it goes with the open, as
    /// do its OFD locks, where the mount serves locks.
    func release(_ reply: consuming Reply, _ handle: UInt64, flockOwner: UInt64?) {
        guard let file = files.remove(handle) else { return reply.error(EBADF) }
        fileLocks?.release(handle, of: file.inode.id, flockOwner: flockOwner.map(LockOwner.init))
        if file.writer != 0 { file.inode.endedWriting(by: file.writer) }
        if file.appends { file.inode.appenders.subtract(1, ordering: .relaxed) }
        if let broken = file.brokenOpen { coordinator.brokenOpens.remove(broken.token, of: broken.process) }
        if file.writesThroughTheKernel { file.inode.endedWritingThroughTheKernel(by: file.kernelWriter) }
        var info = stat()
        let known = fstat(file.fd, &info) == 0
        close(file.fd)
        passthrough?.endOpen(of: file.inode.id)
        inodes.updateLastSeen(file.inode, known ? info : nil)
        let changed = file.changed(now: known ? info : nil)
        if changed && known && versions != nil {
            noteWritten(file.inode, info, by: file.versionReader)
            // Written after it was renamed over or removed (a lease broken, a writer let past):
            // what it wrote is only in the version that holds the inode, which is a conflict now.
            if info.st_nlink == 1, let record = versions?.store.markConflict(holding: info) {
                tellConflict(record, by: reply.caller)
            }
        }
        let outcome = IntentOutcome(existedBefore: !file.created, existsAfter: true, changed: changed)
        coordinator.end(file.claim, outcome: outcome, thenAnswer: reply)
    }

    func fsync(_ reply: consuming Reply, _ handle: UInt64, dataOnly: Bool) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        let result = dataOnly ? fdatasync(file.fd) : Glibc.fsync(file.fd)
        if let failure = result.failure { return reply.error(failure) }
        reply.ok()
    }

    func fallocate(_ reply: consuming Reply, _ handle: UInt64, _ mode: Int32, _ offset: off_t, _ length: off_t) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        guard coordinator.admitsWrite(through: file) else { return reply.error(EIO) }
        dropPrivilegeBits(file.fd, of: file.inode, unlessRootCalls: reply)
        if let failure = cfs_fallocate(file.fd, mode, offset, length).failure { return reply.error(failure) }
        file.written.store(true, ordering: .relaxed)
        if let failure = syncData(of: file.fd) { return reply.error(failure) }
        reply.ok()
    }

    func copyFileRange(
        _ reply: consuming Reply, _ input: UInt64, _ inputOffset: off_t, _ output: UInt64, _ outputOffset: off_t,
        _ length: Int, _ flags: UInt32
    ) {
        guard let source = files[input], let target = files[output] else { return reply.error(EBADF) }
        guard coordinator.admitsWrite(through: target) else { return reply.error(EIO) }
        dropPrivilegeBits(target.fd, of: target.inode, unlessRootCalls: reply)
        var from = inputOffset, to = outputOffset
        let copied = cfs_copy_file_range(source.fd, &from, target.fd, &to, length, flags)
        if let failure = copied.failure { return reply.error(failure) }
        target.written.store(true, ordering: .relaxed)
        if let failure = syncData(of: target.fd) { return reply.error(failure) }
        reply.written(copied)
    }

    func lseek(_ reply: consuming Reply, _ handle: UInt64, _ offset: off_t, _ whence: Int32) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        let result = Glibc.lseek(file.fd, offset, whence)
        if let failure = result.failure { return reply.error(failure) }
        reply.lseek(result)
    }
}

/// setuid and setgid on writes. The kernel leaves them to the mount (HANDLE_KILLPRIV and _V2),
/// whose own writes run as root and so would keep them: a writer without CAP_FSETID (anyone but
/// root, here) clears them as Linux does natively (`privilegeBits`).
extension Filesystem {
    /// The process a write open's `claim` was granted to (its caller's, as `coordinate` named
    /// it); 0 when the open holds nothing.
    /// A claim off the short list may have presenters to tell at the release, when the writer
    /// may have ended: its user and command are read now (`AccessOrigins.remember`).
    func writer(of claim: borrowing MountClaim, _ caller: RequestCaller) -> Int32 {
        guard claim.holds else { return 0 }
        let process = coordinator.callingProcess(caller, now: coarseMilliseconds()) ?? 0
        if process != 0 && !claim.isOnShortList { AccessOrigins.remember(process) }
        return process
    }

    /// The calling thread's process as fanotify names it (its thread group, whatever holds it
    /// inherits): the backing watch takes the writes and the close it makes of a file it opened
    /// through kernel passthrough as the mount's.
    func openingProcess(_ caller: RequestCaller) -> Int32 {
        ProcessInfoCache.caller(of: caller.thread, now: coarseMilliseconds()).process
    }

    /// Whether a write of the file at `fd` by `caller` would clear bits of it (`privilegeBits`).
    func hasPrivilegeBits(_ fd: Int32, clearedFor caller: RequestCaller) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && Self.privilegeBits(of: info, clearedFor: caller) != 0
    }

    /// For writes: nothing to look at when root writes (the common case on this path).
    func dropPrivilegeBits(_ fd: Int32, of inode: Inode, unlessRootCalls reply: borrowing Reply) {
        let caller = reply.caller
        if !caller.mayKeepPrivilegeBits { dropPrivilegeBits(fd, of: inode, clearedFor: caller) }
    }

    /// Clears the bits a write by `caller` (someone without CAP_FSETID) clears of the file at
    /// `fd` (`privilegeBits`). `inode`, when given: the kernel's cached attributes of it are
    /// forgotten, since no reply carries the new mode (a write's, an open's): `stat` would show
    /// the old one for up to the attribute timeout. Whether it cleared any.
    @discardableResult
    func dropPrivilegeBits(_ fd: Int32, of inode: Inode? = nil, clearedFor caller: RequestCaller) -> Bool {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        let bits = Self.privilegeBits(of: info, clearedFor: caller)
        // By path: `fd` may be an O_PATH descriptor, which fchmod refuses.
        guard bits != 0, chmod(procPath(fd), info.st_mode & 0o7777 & ~bits) == 0 else { return false }
        if let inode { invalidateAttributes(of: inode) }
        return true
    }

    /// The bits a write, a truncation or an fallocate of a file with `info` by `caller` (not
    /// root) clears: `privilegeBits(_:writerInGroup:)`, the caller's groups read only when they
    /// decide it.
    static func privilegeBits(of info: stat, clearedFor caller: RequestCaller) -> mode_t {
        guard info.st_mode & S_IFMT == S_IFREG else { return 0 }
        return privilegeBits(info.st_mode, writerInGroup: { caller.isInGroup(info.st_gid) })
    }

    /// The bits of `mode` a write by someone without CAP_FSETID clears, as Linux's
    /// setattr_should_drop_suidgid has them: setuid always; setgid when group execute is set,
    /// or else when the writer is not in the file's group (without group execute, setgid is
    /// the mark of mandatory locking, which a member's writes keep). `writerInGroup` is asked
    /// only for setgid without group execute.
    static func privilegeBits(_ mode: mode_t, writerInGroup: () -> Bool) -> mode_t {
        var bits = mode & S_ISUID
        if mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !writerInGroup()) { bits |= S_ISGID }
        return bits
    }
}
