import LinuxSystem
import CLinux
import CoordinationRuntime
import FileVersions
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its mutable fields are read and written under the table's lock.
/// A node the kernel knows: a file handle and, while it is in use or recently was, an O_PATH
/// descriptor of the backing item; the kernel's lookup count; and the parent and name it was
/// last reached by (the path coordination uses; renames made through the mount keep it right),
/// with the other names a file with hard links was reached by.
///
/// Its descriptor, kept in a slot of the table, is reached only through `InodeTable.withFD`,
/// which pins it for the call.
final class Inode: @unchecked Sendable {
    let id: NodeID
    let device: UInt64
    let number: UInt64
    let isDirectory: Bool
    /// The kernel's file handle; nil when the filesystem or our privileges give none, or when
    /// it was not needed yet (then the descriptor is kept, until open files press the table's
    /// budget: `InodeTable.evictOverBudget` takes one then). Guarded by the table's lock.
    var handle: cfs_file_handle?
    // Guarded by the table's lock.
    var lookups: UInt64 = 0
    var parent: NodeID
    var name: String
    /// Other (parent, name) places of a file with several links, most recent last: one takes
    /// over when the name it is known by goes (`nameRemoved`, `reopenByName`), and without file
    /// handles an evicted file is reopened by one of them when its own name is gone.
    fileprivate(set) var otherPlaces: [Place] = []
    /// The table's descriptor slot it was last given (-1: none yet). It holds the slot while
    /// the slot's owner is itself: an evicted slot is freed and may go to another node.
    /// (Set by `DescriptorSlots` only.)
    var slot = -1
    /// Its descriptor while it holds a slot, else -1: what a pin reads without the table's
    /// lock (`InodeTable.pin`). Written by `DescriptorSlots` only.
    let descriptor = Atomic<Int32>(-1)
    /// Requests using its descriptor now: it is not closed under them (`DescriptorSlots`).
    let pins = Atomic<Int32>(0)
    /// Pinned without the lock since the eviction last passed it (`DescriptorSlots.evict`).
    let usedLately = Atomic<Bool>(false)
    /// The kernel forgot it: its descriptor is closed with its last pin.
    let isForgotten = Atomic<Bool>(false)
    /// Size, mtime and ctime when the last open of it ended: if they are the same at the next
    /// open, nothing changed behind the mount's back and the kernel may keep its page cache.
    var lastSeen: (size: Int64, mtime: timespec, ctime: timespec)?
    /// Known to have no `security.capability`: the kernel asks before every write, and every
    /// change of it goes through the mount (docs/performance.md).
    let hasNoCapability = Atomic<Bool>(false)
    /// Of a directory: its last child looked up was a node already known (or one was just
    /// made in it). Then the next lookup in it tries `InodeTable.knownChild` first; otherwise
    /// the probe would most likely miss, a call spent for nothing, as on a first walk of a tree.
    let childrenAreKnown = Atomic<Bool>(false)
    /// Its coordinated write opens: how many in the high half, and in the low half the process
    /// that holds all of them (0 when more than one process does). See `OpenFile.writer`.
    let writers = Atomic<UInt64>(0)
    /// While more than one process holds them (the low half of `writers` is 0): how many each
    /// process holds; empty otherwise. See `isWritten(by:)`.
    let sharedWriters = Mutex<[Int32: Int]>([:])
    /// Its coordinated appending opens (`OpenFile.appends`): while there are any its file is a
    /// log, whose rotation (a truncation, an open for writing in place) does not wait for its
    /// readers or its appenders.
    let appenders = Atomic<Int>(0)
    /// A file seen with more than one link (hard links) by a lookup: its opens' holds are filed
    /// under one of its names, and a writer by another name may not meet them once that name
    /// is gone. So its readers keep name changes waiting, as before (`Filesystem.openKind`).
    let hasOtherLinks = Atomic<Bool>(false)
    /// Its writable opens the kernel serves from the backing file (kernel passthrough), whose
    /// writes and close carry the writer's process, not the daemon's; and the processes that
    /// made them: how many each has open, and when its last one ended (coarse milliseconds).
    /// See `isWrittenThroughTheKernel`.
    let kernelWriters = Atomic<Int>(0)
    let kernelWriterProcesses = Mutex(KernelWriterProcesses())
    /// The generation of `WatchedWrites` in which its file was marked for its writes (0: not).
    let markGeneration = Atomic<UInt32>(0)
    /// `WatchedWrites`' count of marks when it was marked.
    let markedAt = Atomic<UInt64>(0)
    /// On a host of a shared store: the host's count of delegations taken
    /// (`HostDelegations.acquisitions`) when its name was last found to name it still
    /// (`MountCoordinator.nameNamesAnother`).
    let nameCheckedAt = Atomic<UInt64>(0)
    /// On a mount of the root's own filesystem inside the backing directory (a bind mount,
    /// perhaps read-only): a handle would open it through the root's mount, without that
    /// mount's flags, so it has none and is opened again by name (`InodeTable.handleOpening`).
    let onAnotherMount: Bool
    /// A file made with O_TMPFILE and not linked yet: it has no name, nobody else can reach it,
    /// and requests about it are not coordinated (`Filesystem.tmpfile`). Its first link, looked
    /// up, gives it a place.
    let isUnnamed = Atomic<Bool>(false)

    struct Place: Equatable {
        let parent: NodeID
        let name: String
    }

    /// The parent and name it is known by.
    var knownPlace: Place { Place(parent: parent, name: name) }

    /// Moves the node to `place`, which is no longer one of its others.
    /// (Other places that turn out wrong are dropped when a reopen tries them.)
    fileprivate func place(at place: Place) {
        otherPlaces.removeAll { $0 == place }
        parent = place.parent
        name = place.name
    }

    /// Adds `place` to the other places (a name of a file with hard links looked up anew).
    fileprivate func addOtherPlace(_ place: Place) {
        guard place != knownPlace else { return }
        otherPlaces.removeAll { $0 == place }
        if otherPlaces.count == Self.mostOtherPlaces { otherPlaces.removeFirst() }
        otherPlaces.append(place)
    }

    static let mostOtherPlaces = 8

    init(
        id: NodeID, device: UInt64, number: UInt64, handle: cfs_file_handle?,
        isDirectory: Bool, parent: NodeID, name: String, onAnotherMount: Bool = false
    ) {
        self.id = id
        self.device = device
        self.number = number
        self.handle = handle
        self.onAnotherMount = onAnotherMount
        self.isDirectory = isDirectory
        self.parent = parent
        self.name = name
    }
}

/// Inodes by node id and by (device, inode number). A node id names one item for the mount's
/// life: an item the kernel forgot and that is found again gets its old id back.
///
/// The open-file limit here is 20 000 and cannot be raised, while the kernel may remember far
/// more inodes: at most the pool's `inodeBudget` descriptors stay open (fewer as files open
/// through the mount take more of the pool); the least recently used unpinned ones are closed
/// and opened again from their file handle when next needed.
final class InodeTable: Sendable {
    static let rootID = NodeID(1)

    private struct State: ~Copyable {
        var byID = ShardedDictionary<NodeID, Inode>()
        var byKey = ShardedDictionary<BackingInode, NodeID>()
        /// The number of the next new node.
        var nextID: UInt64 = 2
        /// The descriptors held for inodes (the root's aside).
        var slots = DescriptorSlots()
        /// The nodes the kernel forgot last, for its file handles of them (`revive`).
        var departed = DepartedNodes()
    }

    private let state = Mutex(State())
    let root: Inode
    /// The backing root, O_PATH: kept for the mount's life, never evicted.
    let rootDescriptor: Int32
    /// Every node the kernel knows.
    var knownNodes: [Inode] { state.withLock { $0.byID.values } + [root] }

    /// A regular (not O_PATH) descriptor of the backing root: open_by_handle_at wants one.
    private let handleBase: Int32
    /// The mount the backing root lies on (name_to_handle_at's mount id; -1 without handles):
    /// `handleBase` opens handles through it.
    private let rootMount: Int32
    /// The descriptors this table shares with the files open through the mount.
    let pool: DescriptorPool
    /// The most descriptors kept, while few files are open.
    var descriptorBudget: Int { pool.inodeCeiling }
    /// Whether evicted descriptors are opened again from file handles (needs
    /// CAP_DAC_READ_SEARCH and a backing filesystem that has them); otherwise by name, from the
    /// parent's descriptor, and only if the name still leads to the same inode.
    let usesHandles: Bool
    /// Ids made from backing handles, the same in every life of the mount (nil: all counted).
    let stableIDs: StableNodeIDs?
    /// Whether the version store holds a link to a file (`VersionStore.holdsLink`): a file
    /// removed through the mount whose content it keeps lives on there, not in the mount.
    private let storeLinks: (@Sendable (stat) -> Bool)?
    /// Bumped whenever a directory is known by another parent or name: every path at or below
    /// it changed, and paths remembered from before (`DirectoryContexts`) are stale.
    let directoryNamesGeneration = LoneCounter()
    /// Bumped whenever a node is known by another parent or name, file or directory: a path
    /// named from the table before may be stale (`Filesystem.movedBeforeHeld`).
    let placesGeneration = LoneCounter()
    /// Nodes with other places (files with hard links looked up by several names): while there
    /// are none, removing a name needs no look at what it named (`nameGoing`).
    private let nodesWithOtherPlaces = Atomic<Int>(0)

    /// Runs `change` on `inode`'s places, the table locked, and keeps count of the nodes that
    /// have other places.
    private func changingPlaces(of inode: Inode, _ change: (Inode) -> Void) {
        let hadOthers = !inode.otherPlaces.isEmpty
        let (parent, name) = (inode.parent, inode.name)
        change(inode)
        let hasOthers = !inode.otherPlaces.isEmpty
        if hadOthers != hasOthers { nodesWithOtherPlaces.add(hasOthers ? 1 : -1, ordering: .relaxed) }
        if inode.parent != parent || inode.name != name { placesGeneration.increment() }
    }

    /// A table keeping at most `descriptorBudget` descriptors, within `pool` when it shares one
    /// with open files.
    init(
        rootFD: Int32, rootStat: stat, descriptorBudget: Int, fileHandles: Bool = true, pool: DescriptorPool? = nil,
        storeLinks: (@Sendable (stat) -> Bool)? = nil
    ) {
        self.storeLinks = storeLinks
        handleBase = open(procPath(rootFD), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        root = Inode(
            id: Self.rootID, device: UInt64(rootStat.st_dev), number: UInt64(rootStat.st_ino),
            handle: nil, isDirectory: true, parent: Self.rootID, name: "")
        rootDescriptor = rootFD
        root.lookups = 1
        self.pool = pool ?? DescriptorPool(size: max(32, descriptorBudget), inodeCeiling: descriptorBudget)
        var probe = cfs_file_handle()
        var usesHandles = false
        var mount: Int32 = -1
        if fileHandles, handleBase >= 0, cfs_name_to_handle(rootFD, &probe, &mount) == 0 {
            let again = cfs_open_by_handle(handleBase, &probe)
            if again >= 0 { close(again); usesHandles = true }
        }
        self.usesHandles = usesHandles
        rootMount = mount
        stableIDs = StableNodeIDs(rootFD: rootFD, device: UInt64(rootStat.st_dev), handlesWork: usesHandles)
        // Its thread is started now, not by the first eviction's request.
        _ = DescriptorCloser.shared
        let root = self.root
        state.withLock { state in
            state.byID[Self.rootID] = root
            state.byKey[BackingInode(device: root.device, number: root.number)] = Self.rootID
        }
    }

    /// A mount made in a process that lives on (a program using the library, the tests) gives
    /// its descriptors back when its table goes: thousands of them otherwise stayed open.
    deinit {
        let descriptors = state.withLock { state in state.slots.descriptors }
        for fd in descriptors + [rootDescriptor, handleBase] where fd >= 0 { close(fd) }
    }

    subscript(node: NodeID) -> Inode? {
        if node == Self.rootID { return root }
        return state.withLock { $0.byID[node] }
    }

    /// Runs `body` with the node's descriptor, pinned: it is not closed until `body` returns.
    func withFD<T>(_ inode: Inode, _ body: (Int32) throws(Errno) -> T) throws(Errno) -> T {
        let fd = try pin(inode)
        defer { unpin(inode) }
        return try body(fd)
    }

    /// `withFD` for bodies that report failure in their result rather than by throwing.
    func withFD<T>(_ inode: Inode, orElse failure: (Errno) -> T, _ body: (Int32) -> T) -> T {
        do { return try withFD(inode) { fd throws(Errno) in body(fd) } } catch { return failure(error) }
    }

    /// `withFD` for a body that takes over `context` (a request's reply, which cannot be
    /// copied): `failure` gets it instead when the node cannot be opened.
    func withFD<Context: ~Copyable>(
        _ inode: Inode, passing context: consuming Context,
        orElse failure: (consuming Context, Errno) -> Void,
        _ body: (consuming Context, Int32) -> Void
    ) {
        let fd: Int32
        do { fd = try pin(inode) } catch { return failure(context, error) }
        defer { unpin(inode) }
        body(context, fd)
    }

    /// The node's descriptor, pinned: counted in its `pins` first, then read; without the
    /// table's lock while the node holds a slot (`DescriptorSlots` gives one up the other way
    /// round), else opened again under it.
    private func pin(_ inode: Inode) throws(Errno) -> Int32 {
        if inode.id == Self.rootID { return rootDescriptor }
        inode.pins.add(1, ordering: .sequentiallyConsistent)
        let fd = inode.descriptor.load(ordering: .sequentiallyConsistent)
        if fd >= 0 {
            if !inode.usedLately.load(ordering: .relaxed) { inode.usedLately.store(true, ordering: .relaxed) }
            return fd
        }
        do throws(Errno) { return try pinAgain(inode) } catch {
            unpin(inode)
            throw error
        }
    }

    /// `pin` for a node without a descriptor just now (its pin counted already): its slot's,
    /// if it got one back meanwhile, else opened again from its handle or its name.
    private func pinAgain(_ inode: Inode) throws(Errno) -> Int32 {
        let (ready, handle) = state.withLock { state -> (Int32?, cfs_file_handle?) in
            state.slots.touch(inode)
            guard let slot = state.slots.slot(of: inode) else { return (nil, inode.handle) }
            return (state.slots.descriptors[slot], nil)
        }
        if let ready { return ready }
        let fd: Int32
        if var handle {
            fd = withDescriptorRoom { cfs_open_by_handle(handleBase, &handle) }
            if let failure = fd.failure { throw failure }
        } else {
            fd = try reopenByName(inode)
        }
        let (chosen, extra, evicted) = state.withLock { state -> (Int32, Int32?, [Int32]) in
            if let slot = state.slots.slot(of: inode) {  // opened meanwhile by another request
                return (state.slots.descriptors[slot], fd, [])
            }
            state.slots.attach(fd, to: inode, evictable: evictable(inode))
            return (fd, nil, evictOverBudget(&state))
        }
        if let extra { close(extra) }
        closeLater(evicted)
        return chosen
    }

    /// Opens `inode` again from its parent's descriptor and its last known name, which may
    /// mean opening the parent again first; for a file with hard links, by another name it was
    /// reached by when that one is gone (which then becomes its name). ESTALE when no name
    /// leads to it any more (renamed or replaced behind the mount's back): the kernel looks
    /// the name up again after that.
    private func reopenByName(_ inode: Inode) throws(Errno) -> Int32 {
        let (first, others) = state.withLock { _ in (inode.knownPlace, inode.otherPlaces) }
        var failure = Errno(code: ESTALE)
        var wrong: [Inode.Place] = []
        var found: (fd: Int32, place: Inode.Place)?
        for place in [first] + others.reversed() where found == nil {
            guard let parent = self[place.parent], parent !== inode else { wrong.append(place); continue }
            do throws(Errno) {
                let (fd, info) = try openChild(named: place.name, in: parent)
                if UInt64(info.st_dev) == inode.device, UInt64(info.st_ino) == inode.number {
                    found = (fd, place)
                } else {
                    close(fd)
                    wrong.append(place)
                }
            } catch {
                if error.code == ENOENT { wrong.append(place) } else if error.code != ESTALE { failure = error }
            }
        }
        state.withLock { _ in
            changingPlaces(of: inode) { inode in
                inode.otherPlaces.removeAll { wrong.contains($0) }
                // Known by the name that led to it from now on, unless a lookup meanwhile moved it.
                if let found, found.place != first, inode.knownPlace == first {
                    inode.place(at: found.place)
                }
            }
        }
        guard let found else { throw failure }
        return found.fd
    }

    /// `name` in `parent`, opened O_PATH (not following a symbolic link), and its attributes.
    func openChild(named name: String, in parent: Inode) throws(Errno) -> (fd: Int32, info: stat) {
        let fd = try withFD(parent) { parentFD throws(Errno) in
            // A short name is no contiguous C string: passed as a String it would be copied to the heap.
            try check(
                withDescriptorRoom {
                    FileSystemName.withCString(name) { openat(parentFD, $0, CFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
                })
        }
        do throws(Errno) { return (fd, try statOf(fd)) } catch { close(fd); throw error }
    }

    /// The node's item opened with `flags` for a request's own use (an open file, the backing
    /// file of kernel passthrough); the caller closes it. Opened straight from its handle where
    /// it has a stable id, or a handle and no descriptor: one call, where a path through /proc
    /// walks four names and reads a link (about twice the time), and a node without a
    /// descriptor (a file looked up and not opened yet, or evicted) stays without one, needing
    /// no O_PATH descriptor first, nor the table's lock, nor a slot of the budget. Otherwise,
    /// or where the handle is stale for a node holding a descriptor, through that descriptor's
    /// /proc path.
    func openItem(of inode: Inode, flags: Int32) -> Result<Int32, Errno> {
        if inode.id != Self.rootID {
            let held = inode.descriptor.load(ordering: .relaxed) >= 0
            // A stable id is the handle (read without the lock); else the node's own, kept
            // under the lock, taken only where the node holds no descriptor.
            let handle =
                stableIDs?.handle(of: inode.id)
                ?? (held ? nil : state.withLock { state in state.slots.slot(of: inode) == nil ? inode.handle : nil })
            if var handle {
                let fd = withDescriptorRoom { cfs_open_by_handle_with(handleBase, &handle, flags) }
                guard let failure = fd.failure else { return .success(fd) }
                // Any other failure the path would meet too.
                if !held || failure.code != ESTALE { return .failure(failure) }
            }
        }
        // errno is read inside: releasing the pin may touch it.
        return withFD(inode, orElse: { .failure($0) }) { inodeFD in
            let fd = withDescriptorRoom { Glibc.open(procPath(inodeFD), flags) }
            if let failure = fd.failure { return .failure(failure) }
            return .success(fd)
        }
    }

    /// Counts a pin out. The last of a node the kernel forgot closes its descriptor (`forget`
    /// marks the node, then looks for pins; this counts out, then looks at the mark: one of
    /// the two sees the other).
    private func unpin(_ inode: Inode) {
        if inode.id == Self.rootID { return }
        guard inode.pins.subtract(1, ordering: .sequentiallyConsistent).newValue == 0,
            inode.isForgotten.load(ordering: .sequentiallyConsistent)
        else { return }
        let closing = state.withLock { state -> Int32? in
            state.slots.slot(of: inode).flatMap { state.slots.detachIfUnpinned($0) }
        }
        if let closing { close(closing) }
    }

    /// With handles, items remembered early (without one) keep their descriptor for life, as a
    /// name can be changed behind the mount's back; without handles, names it is, as for items
    /// on another filesystem than the root's, whose handles the table cannot open.
    private func evictable(_ inode: Inode) -> Bool {
        inode.handle != nil || !usesHandles || !handlesOpen(inode)
    }

    /// Whether a handle of `inode` opens it as its name does: `handleBase` opens handles on the
    /// root's filesystem alone (another filesystem's handle opens nothing there, ESTALE, or at
    /// worst another file), and through the root's mount (`Inode.onAnotherMount`).
    private func handlesOpen(_ inode: Inode) -> Bool { inode.device == root.device && !inode.onAnotherMount }

    /// The handle of the item open at `fd`, and whether it lies on another mount than the
    /// root's (then the handle is not to be used: `handlesOpen`).
    private func handleOpening(_ fd: Int32) -> (handle: cfs_file_handle?, onAnotherMount: Bool) {
        var handle = cfs_file_handle()
        var mount: Int32 = -1
        guard cfs_name_to_handle(fd, &handle, &mount) == 0 else { return (nil, false) }
        return mount == rootMount ? (handle, false) : (nil, true)
    }

    private func closeLater(_ evicted: [Int32]) { DescriptorCloser.shared.close(evicted) }

    /// Evicts down to the pool's budget for inodes now. Where the descriptors that can be
    /// reopened are too few (open files pressed the budget below the items that kept theirs
    /// for life, remembered without a handle while the table was far from full), those items
    /// are given a file handle now and evicted too: a few syscalls under the lock, only while
    /// open files press on the table.
    private func evictOverBudget(_ state: inout State) -> [Int32] {
        let budget = pool.inodeBudget
        var evicted = state.slots.evict(budget: budget)
        guard usesHandles, state.slots.open > budget else { return evicted }
        var excess = state.slots.open - budget * 9 / 10
        for slot in state.slots.keptForLife() where excess > 0 {
            guard let inode = state.slots.owners[slot], inode.handle == nil, handlesOpen(inode),
                !inode.isUnnamed.load(ordering: .relaxed),
                let handle = handleOpening(state.slots.descriptors[slot]).handle
            else { continue }
            inode.handle = handle
            guard let fd = state.slots.detachIfUnpinned(slot) else {
                // Pinned just now: evictable from here on, as any node with a handle.
                state.slots.uses[slot] = state.slots.clock
                continue
            }
            evicted.append(fd)
            excess -= 1
        }
        return evicted
    }

    /// Gives up descriptors down to the pool's budget for inodes, which files just opened
    /// through the mount lowered. Costs nothing while open files leave the table its ceiling.
    func keepWithinBudget() {
        guard pool.pressesOnInodes else { return }
        closeLater(state.withLock { state in state.slots.open > pool.inodeBudget ? evictOverBudget(&state) : [] })
    }

    /// Runs `open` (a call returning a new descriptor), and once more when it failed for want
    /// of descriptors (EMFILE, ENFILE), after closing what the closer still had to close and a
    /// tenth of the table's least recently used descriptors, here and now. The budgets keep the
    /// daemon within its limit; this is for what they do not count (a burst of evictions not
    /// closed yet, the daemon's own descriptors).
    func withDescriptorRoom(_ open: () -> Int32) -> Int32 {
        let fd = open()
        guard fd < 0, let failure = fd.failure, failure.code == EMFILE || failure.code == ENFILE else { return fd }
        DescriptorCloser.shared.closePending()
        let evicted = state.withLock { state in
            state.slots.evict(budget: max(16, min(state.slots.open, pool.inodeBudget) - 16), secondChances: false)
        }
        for descriptor in evicted { close(descriptor) }
        return open()
    }

    /// Records a lookup of `name` in `parent` that found the item open at `fd` with `info`.
    /// Takes ownership of `fd` (closes it when the item was known already). An item the kernel
    /// forgot gets its old id back, so that its handles still open it; one `justMade` is new.
    /// `counting`: the kernel is told of it (not so for a directory found on the way to a node
    /// revived by its handle).
    func remember(
        fd: Int32, info: stat, in parentNode: Inode, name: String, justMade: Bool = false, counting: Bool = true
    ) -> Inode {
        let device = UInt64(info.st_dev)
        var found = (handle: cfs_file_handle?.none, onAnotherMount: false)
        var stableID: NodeID?
        if let stableIDs, device == stableIDs.device {
            // Its id is its handle: a syscall for each item looked up or made.
            found = handleOpening(fd)
            stableID = found.handle.flatMap { stableIDs.id(for: $0) }
        } else if usesHandles && device == root.device
            && state.withLock({ $0.slots.open }) >= pool.inodeBudget / 2
        {
            // A handle costs a syscall and matters only once the budget can be reached: items
            // remembered while under half of it keep their descriptor for life.
            found = handleOpening(fd)
        }
        return remember(
            Found(fd: fd, info: info, handle: found.handle, stableID: stableID, onAnotherMount: found.onAnotherMount),
            in: parentNode, name: name, justMade: justMade, counting: counting
        ).node
    }

    /// An item a lookup found: open at `fd` (the table takes it), or not opened (`rememberUnopened`).
    private struct Found {
        let fd: Int32?
        let info: stat
        let handle: cfs_file_handle?
        let stableID: NodeID?
        var onAnotherMount = false
    }

    /// The node for `found`, and whether it was known.
    private func remember(
        _ found: Found, in parentNode: Inode, name: String, justMade: Bool, counting: Bool
    ) -> (node: Inode, known: Bool) {
        let (info, stableID, parent) = (found.info, found.stableID, parentNode.id)
        let key = BackingInode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let (inode, unused, evicted, known) = state.withLock { state -> (Inode, Int32?, [Int32], Bool) in
            state.slots.clock += 1
            if let known = matching(found, key, &state) {
                noteLookup(of: known, info: info, parent: parent, name: name, counting: counting, &state)
                guard let fd = found.fd else { return (known, nil, [], true) }
                if state.slots.slot(of: known) == nil {  // reopened for free: keep this one
                    state.slots.attach(fd, to: known, evictable: evictable(known))
                    return (known, nil, evictOverBudget(&state), true)
                }
                // `knownChild` would have found it with one call.
                parentNode.childrenAreKnown.store(true, ordering: .relaxed)
                return (known, fd, [], true)
            }
            let isDirectory = (info.st_mode & S_IFMT) == S_IFDIR
            let id: NodeID
            if let stableID {
                // Its id is its own: a counted id its inode departed under is done with.
                state.departed.remove(device: key.device, number: key.number)
                id = stableID
            } else if !justMade,
                let departedID = state.departed.reclaim(
                    device: key.device, number: key.number, isDirectory: isDirectory, parent: parent, name: name)
            {
                id = departedID
            } else {
                id = NodeID(state.nextID)
                state.nextID += 1
            }
            let inode = Inode(
                id: id, device: key.device, number: key.number, handle: found.handle, isDirectory: isDirectory,
                parent: parent, name: name, onAnotherMount: found.onAnotherMount)
            inode.lookups = counting ? 1 : 0
            if !isDirectory && info.st_nlink > 1 { inode.hasOtherLinks.store(true, ordering: .relaxed) }
            return (inode, nil, insert(inode, key, fd: found.fd, &state), false)
        }
        if let unused { close(unused) }
        closeLater(evicted)
        return (inode, known)
    }

    /// The known node `found` is, if any. A known node with another stable id had the inode
    /// number before: nothing held its inode (its descriptor evicted, or never opened), and the
    /// number went to this item. One with a counted id is the item only if its descriptor
    /// holds the inode, or `found` is open. `byKey` follows the node found by its stable id.
    private func matching(_ found: Found, _ key: BackingInode, _ state: inout State) -> Inode? {
        if let stableID = found.stableID, let known = state.byID[stableID] {
            if state.byKey[key] != stableID { state.byKey[key] = stableID }
            return known
        }
        guard let id = state.byKey[key], let known = state.byID[id] else { return nil }
        if found.stableID == nil { return known }
        return !id.isStable && (found.fd != nil || state.slots.slot(of: known) != nil) ? known : nil
    }

    /// A lookup of `name` in `parent` that opens nothing: the item's attributes and its handle,
    /// both by name, where the handle is its stable id and says its inode number (ext4). Most items
    /// looked up are stat'ed and never opened (`ls -l`, `find`, `git status`, a build checking
    /// its tree): their node is opened from its handle only when a request needs its
    /// descriptor (`pin`), and the lookup saves the open and, when the kernel forgets the
    /// node, the close.
    ///
    /// Nil where it cannot be: a directory (the lookups below it need its descriptor), an item
    /// on another filesystem or mount (`Inode.onAnotherMount`), a handle that names another inode than the stat found (the name
    /// changed between the two calls): the caller opens it (`openChild`, `remember`). The
    /// handle is taken first: where the name went to a new file with the same inode number
    /// between the two calls, the handle's file is gone, and the node's id opens nothing
    /// (ESTALE, and the kernel looks the name up again), rather than the new file's id
    /// answering with the old file's attributes.
    /// `known`: the item was known (a lookup again, the kernel's entry timed out).
    func rememberUnopened(named name: String, in parent: Inode) throws(Errno) -> (Inode, stat, known: Bool)? {
        guard let stableIDs, stableIDs.handlesSayTheInode else { return nil }
        var info = stat()
        var handle = cfs_file_handle()
        var mount: Int32 = -1
        let handled = try withFD(parent) { parentFD throws(Errno) -> Bool in
            let hasHandle =
                FileSystemName.withCString(name) { cfs_name_to_handle_at(parentFD, $0, &handle, &mount) } == 0
            _ = try check(FileSystemName.withCString(name) { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) })
            return hasHandle && mount == rootMount && (info.st_mode & S_IFMT) != S_IFDIR
                && UInt64(info.st_dev) == stableIDs.device
        }
        guard handled, let id = stableIDs.id(for: handle, ofInode: UInt64(info.st_ino)) else { return nil }
        let found = Found(fd: nil, info: info, handle: handle, stableID: id)
        let (node, known) = remember(found, in: parent, name: name, justMade: false, counting: true)
        return (node, info, known)
    }

    /// Records a new node, open at `fd` (or not opened yet); returns the descriptors its own evicted.
    private func insert(_ inode: Inode, _ key: BackingInode, fd: Int32?, _ state: inout State) -> [Int32] {
        state.byID[inode.id] = inode
        state.byKey[key] = inode.id
        guard let fd else { return [] }
        state.slots.attach(fd, to: inode, evictable: evictable(inode))
        return evictOverBudget(&state)
    }

    /// Records a file made with O_TMPFILE in `parent`, open at `fd` (an O_PATH descriptor the
    /// table takes), as a node with no name (`Inode.isUnnamed`). Its descriptor is never
    /// evicted: an unlinked file can be reopened neither by name nor, surely, by handle.
    func rememberUnnamed(fd: Int32, info: stat, in parent: Inode) -> Inode {
        rememberWithoutName(fd: fd, info: info, parent: parent.id, id: nil, handle: nil, counting: true)
    }

    /// A node with no name (`Inode.isUnnamed`), its requests not coordinated until a lookup
    /// names it: made with O_TMPFILE (`id` nil: counted, and its descriptor kept), or revived
    /// by `handle` where the system has forgotten its name. A node known for the item
    /// meanwhile is the one returned.
    private func rememberWithoutName(
        fd: Int32, info: stat, parent: NodeID, id given: NodeID?, handle: cfs_file_handle?, counting: Bool
    ) -> Inode {
        let key = BackingInode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let (inode, unused, evicted) = state.withLock { state -> (Inode, Int32?, [Int32]) in
            state.slots.clock += 1
            if given != nil, let id = state.byKey[key], let known = state.byID[id] {
                if counting { known.lookups += 1 }
                return (known, fd, [])
            }
            let id = given ?? NodeID(state.nextID)
            if given == nil { state.nextID += 1 }
            let inode = Inode(
                id: id, device: key.device, number: key.number, handle: handle, isDirectory: false,
                parent: parent, name: "")
            inode.isUnnamed.store(true, ordering: .relaxed)
            inode.lookups = counting ? 1 : 0
            state.byID[id] = inode
            state.byKey[key] = id
            state.slots.attach(fd, to: inode, evictable: handle != nil)
            return (inode, nil, evictOverBudget(&state))
        }
        if let unused { close(unused) }
        closeLater(evicted)
        return inode
    }

    /// The node already known for `name` in `parent`, found with one fstatat instead of an open,
    /// a stat and a close (a LOOKUP of a name the kernel knew, once its entry
    /// timed out, is most of them); nil when the item is not known, or known without a
    /// descriptor: the caller then opens it. A node's descriptor keeps its inode alive, so the
    /// inode's number cannot have gone to another file meanwhile. A miss clears the parent's
    /// `childrenAreKnown`.
    func knownChild(named name: String, in parent: Inode) throws(Errno) -> (Inode, stat)? {
        var info = stat()
        try withFD(parent) { parentFD throws(Errno) in
            _ = try check(FileSystemName.withCString(name) { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) })
        }
        let key = BackingInode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let known = state.withLock { state -> Inode? in
            guard let id = state.byKey[key], let known = state.byID[id], state.slots.slot(of: known) != nil else {
                return nil
            }
            noteLookup(of: known, info: info, parent: parent.id, name: name, counting: true, &state)
            return known
        }
        guard let known else {
            parent.childrenAreKnown.store(false, ordering: .relaxed)
            return nil
        }
        return (known, info)
    }

    /// A lookup found `known` by `name` in `parent` (the table's lock is held).
    private func noteLookup(
        of known: Inode, info: stat, parent: NodeID, name: String, counting: Bool, _ state: inout State
    ) {
        state.slots.touch(known)
        if counting { known.lookups += 1 }
        if known.isDirectory && (known.parent != parent || known.name != name) {
            directoryNamesGeneration.increment()
        }
        let place = Inode.Place(parent: parent, name: name)
        changingPlaces(of: known) { known in
            if known.isUnnamed.load(ordering: .relaxed) {
                // An O_TMPFILE file's first name: its link.
                known.place(at: place)
                known.isUnnamed.store(false, ordering: .relaxed)
            } else if !known.isDirectory && info.st_nlink > 1 {
                known.hasOtherLinks.store(true, ordering: .relaxed)
                // Another name of a file with hard links: the file keeps the path it is
                // coordinated by, so that opens by either name conflict (when each lookup
                // moved it, a reader that looked up the other name opened the file while
                // a writer held it).
                known.addOtherPlace(place)
            } else {
                // Renamed behind the mount's back.
                known.place(at: place)
            }
        }
    }

    /// The kernel forgets `count` lookups; at zero the node goes, and its descriptor once no
    /// request holds it.
    func forget(_ id: NodeID, _ count: UInt64) { forget(CollectionOfOne((id, count))) }

    /// `forget` for each of a BATCH_FORGET's nodes, the table locked once for up to
    /// `forgetsPerLock` of them: taken for each, the lock passed back and forth between this
    /// thread and the lookups that made the nodes, each side spinning for it in turn. Nodes
    /// gone are freed, and their descriptors closed, once it is unlocked.
    func forget<Forgets: Collection<(NodeID, UInt64)>>(_ forgets: Forgets) {
        var rest = forgets[...]
        while !rest.isEmpty {
            let batch = rest.prefix(Self.forgetsPerLock)
            rest = rest.dropFirst(Self.forgetsPerLock)
            let (gone, closing) = state.withLock { state -> ([Inode], [Int32]) in
                var gone: [Inode] = []
                var closing: [Int32] = []
                for (id, count) in batch where id != Self.rootID {
                    guard let inode = forgetLocked(id, count, &state) else { continue }
                    gone.append(inode)
                    if let fd = state.slots.slot(of: inode).flatMap({ state.slots.detachIfUnpinned($0) }) {
                        closing.append(fd)
                    }
                }
                return (gone, closing)
            }
            for fd in closing { close(fd) }
            _ = gone  // released here, unlocked
        }
    }

    /// A lock held at most about this many forgets long (a few microseconds each), so that
    /// lookups wait behind a long batch only a little.
    static let forgetsPerLock = 32

    /// Counts `count` lookups of `id` out; at zero, removes the node and returns it.
    private func forgetLocked(_ id: NodeID, _ count: UInt64, _ state: inout State) -> Inode? {
        guard let inode = state.byID[id] else { return nil }
        inode.lookups -= min(count, inode.lookups)
        guard inode.lookups == 0 else { return nil }
        state.byID[id] = nil
        let key = BackingInode(device: inode.device, number: inode.number)
        if state.byKey[key] == id { state.byKey[key] = nil }  // else its number went to another item
        inode.isForgotten.store(true, ordering: .sequentiallyConsistent)
        let others = inode.otherPlaces
        changingPlaces(of: inode) { $0.otherPlaces = [] }
        // With its removal: a lookup by name in between would find the item neither known
        // nor departed, and give it a new id.
        if !inode.isUnnamed.load(ordering: .relaxed) {
            state.departed.add(
                id,
                DepartedNodes.Record(
                    parent: inode.parent, name: inode.name, device: inode.device,
                    number: inode.number, isDirectory: inode.isDirectory,
                    hadOtherLinks: inode.hasOtherLinks.load(ordering: .relaxed), others: others))
        }
        return inode
    }

    /// The node `id`, known, or one the kernel forgot and asks for again (a file handle: a
    /// LOOKUP of "." in it), found by the places it was last known by (its parent found again
    /// the same way) and checked to be the same item (`findAgain`); a stable id, also by its
    /// backing handle (`reviveByHandle`), after the mount was mounted again too. `countingLookup`:
    /// the kernel will hold it (the node it asked for); an ancestor found again on the way is
    /// held by no one. ESTALE when it is not remembered, or no place of it leads to it any more.
    func revive(_ id: NodeID, countingLookup: Bool) throws(Errno) -> (Inode, stat) {
        // Known: counted under the lock that a FORGET takes, which might otherwise drop it between.
        // Else where it was last known, looked up with it: a node is one or the other.
        let (known, departedAt): (Inode?, DepartedNodes.Record?) =
            id == Self.rootID
            ? (root, nil)
            : state.withLock { state in
                guard let known = state.byID[id] else { return (nil, state.departed.record(of: id)) }
                if countingLookup { known.lookups += 1 }
                return (known, nil)
            }
        if let known {
            do throws(Errno) {
                return (known, try withFD(known) { fd throws(Errno) in try statOf(fd) })
            } catch {
                // Not answered: the kernel does not count it (a node never opened whose file is gone).
                if countingLookup { forget(id, 1) }
                throw error
            }
        }
        if id.isStable { return try reviveByHandle(id, departed: departedAt, countingLookup: countingLookup) }
        guard let gone = departedAt, let found = findAgain(gone) else { throw Errno(code: ESTALE) }
        return try insertRevived(id, found, isDirectory: gone.isDirectory, countingLookup: countingLookup)
    }

    /// Records `id` for the item found again (`findAgain`), which the table takes.
    private func insertRevived(
        _ id: NodeID, _ found: (fd: Int32, info: stat, place: Inode.Place, others: [Inode.Place]),
        isDirectory: Bool, countingLookup: Bool
    ) throws(Errno) -> (Inode, stat) {
        let (fd, info, place, others) = found
        let key = BackingInode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let handle = id.isStable ? handleOpening(fd).handle : nil
        let (inode, unused, evicted) = state.withLock { state -> (Inode?, Int32?, [Int32]) in
            if let other = state.byKey[key] {
                // Looked up by name again meanwhile, under another id: this handle is stale.
                guard other == id, let known = state.byID[id] else { return (nil, fd, []) }
                if countingLookup { known.lookups += 1 }
                return (known, fd, [])
            }
            let inode = Inode(
                id: id, device: key.device, number: key.number, handle: handle,
                isDirectory: isDirectory, parent: place.parent, name: place.name)
            inode.lookups = countingLookup ? 1 : 0
            if !isDirectory && info.st_nlink > 1 { inode.hasOtherLinks.store(true, ordering: .relaxed) }
            // With its insertion, as `forget` adds it: a forget right after adds it anew.
            state.departed.remove(id)
            let evicted = insert(inode, key, fd: fd, &state)
            // Its other names stay known: the one it is known by may be removed next.
            if !others.isEmpty { changingPlaces(of: inode) { $0.otherPlaces = others } }
            return (inode, nil, evicted)
        }
        if let unused { close(unused) }
        closeLater(evicted)
        guard let inode else { throw Errno(code: ESTALE) }
        return (inode, info)
    }

    /// A node with a stable id the table does not know: its backing handle opened (the backing
    /// checks its generation, so a removed item's is stale), then placed where the mount last
    /// knew it, or else where the backing's own path for it leads, each directory on the way
    /// looked up from the root. A file whose name the system has forgotten (its dentry dropped,
    /// as after drop_caches: /proc names it "/") has no place the mount could coordinate it by:
    /// a node with no name where the backing root is its filesystem's root (the file is below
    /// it, then), stale elsewhere (it might not be).
    private func reviveByHandle(
        _ id: NodeID, departed: DepartedNodes.Record?, countingLookup: Bool
    ) throws(Errno) -> (Inode, stat) {
        guard var handle = stableIDs?.handle(of: id) else { throw Errno(code: ESTALE) }
        let fd = withDescriptorRoom { cfs_open_by_handle(handleBase, &handle) }
        guard fd >= 0 else { throw Errno(code: ESTALE) }
        defer { close(fd) }
        let info = try statOf(fd)
        func isIt(_ other: stat) -> Bool { other.st_dev == info.st_dev && other.st_ino == info.st_ino }
        if let departed, let found = findAgain(departed) {
            if isIt(found.1) {
                return try insertRevived(id, found, isDirectory: departed.isDirectory, countingLookup: countingLookup)
            }
            close(found.0)
        }
        guard let names = backingNames(of: fd), let name = names.last else {
            // Where the backing root is its filesystem's, every file of it is below the root
            // (unless its one link left is the version store's: removed through the mount).
            let links = Int(info.st_nlink) - (storeLinks?(info) == true ? 1 : 0)
            guard stableIDs?.rootIsFilesystemRoot == true, info.st_mode & S_IFMT != S_IFDIR, links > 0,
                case let again = withDescriptorRoom({ dup(fd) }), again >= 0
            else { throw Errno(code: ESTALE) }
            let inode = rememberWithoutName(
                fd: again, info: info, parent: Self.rootID, id: id, handle: handle, counting: countingLookup)
            return (inode, info)
        }
        var directory = root
        for step in names.dropLast() {
            let (stepFD, stepInfo) = try openChild(named: step, in: directory)
            guard stepInfo.st_mode & S_IFMT == S_IFDIR else { close(stepFD); throw Errno(code: ESTALE) }
            directory = remember(fd: stepFD, info: stepInfo, in: directory, name: step, counting: false)
        }
        let (childFD, childInfo) = try openChild(named: name, in: directory)
        guard isIt(childInfo) else { close(childFD); throw Errno(code: ESTALE) }
        let inode = remember(fd: childFD, info: childInfo, in: directory, name: name, counting: countingLookup)
        guard inode.id == id else {
            // Known under another id (a file made with O_TMPFILE, counted): not this handle's.
            if countingLookup { forget(inode.id, 1) }
            throw Errno(code: ESTALE)
        }
        return (inode, childInfo)
    }

    /// The names from the backing root down to the item open at `fd`, as the system names it
    /// now; nil when that is not below the root (or is in the version store, which the mount
    /// does not show), the item was removed, or its name was forgotten.
    private func backingNames(of fd: Int32) -> [String]? {
        guard let path = pathBytes(of: fd).map(FileSystemName.string),
            let rootPath = pathBytes(of: rootDescriptor).map(FileSystemName.string)
        else { return nil }
        let prefix = rootPath == "/" ? "/" : rootPath + "/"
        guard path.hasPrefix(prefix), !path.hasSuffix(" (deleted)") else { return nil }
        let names = path.dropFirst(prefix.count).split(separator: "/").map(String.init)
        guard let first = names.first, first != VersionStore.directoryName else { return nil }
        return names
    }

    /// The item a departed node was, opened O_PATH: at the place it was known by, or else at
    /// another place a file with hard links was reached by (the latest first), each checked to
    /// name the same item; or else, for a file seen with other links, under a name the mount
    /// never knew in one of those places' directories (`otherName`): linked behind the mount,
    /// or by a lookup the kernel has forgotten, before its known names were unlinked. Its
    /// attributes, the place it was found at, and the other places not proved wrong (most
    /// recent last, as `Inode.otherPlaces`).
    private func findAgain(_ gone: DepartedNodes.Record) -> (Int32, stat, Inode.Place, [Inode.Place])? {
        let places = [Inode.Place(parent: gone.parent, name: gone.name)] + gone.others.reversed()
        var directories: [Inode] = []
        for (index, place) in places.enumerated() {
            guard let (directory, _) = try? revive(place.parent, countingLookup: false) else { continue }
            if !directories.contains(where: { $0 === directory }) { directories.append(directory) }
            guard let (fd, info) = try? openChild(named: place.name, in: directory) else { continue }
            if UInt64(info.st_dev) == gone.device && UInt64(info.st_ino) == gone.number {
                return (fd, info, place, Array(places[(index + 1)...].reversed()))
            }
            close(fd)
        }
        guard gone.hadOtherLinks else { return nil }
        for directory in directories {
            if let (fd, info, name) = otherName(of: gone, in: directory) {
                return (fd, info, Inode.Place(parent: directory.id, name: name), [])
            }
        }
        return nil
    }

    /// A name in `directory` of the file `gone` was, found by reading the directory for its
    /// inode number and opened O_PATH, checked to be that file. Read only for a file seen with
    /// hard links, once none of its known names leads to it.
    private func otherName(of gone: DepartedNodes.Record, in directory: Inode) -> (Int32, stat, String)? {
        let listing = withFD(directory, orElse: { _ in Int32(-1) }) { fd in
            Glibc.open(procPath(fd), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        }
        guard listing >= 0 else { return nil }
        guard let stream = fdopendir(listing) else { close(listing); return nil }
        defer { closedir(stream) }
        while let found = try? nextEntry(of: stream) {
            // Read in place (`DirectoryEntry`); a name made only for the entry sought.
            let entry = UnsafePointer(found)
            guard UInt64(entry.pointer(to: \.d_ino)!.pointee) == gone.number else { continue }
            let name = DirectoryEntry(entry).name
            guard let (fd, info) = try? openChild(named: name, in: directory) else { continue }
            if UInt64(info.st_dev) == gone.device && UInt64(info.st_ino) == gone.number
                && info.st_mode & S_IFMT != S_IFDIR
            {
                return (fd, info, name)
            }
            close(fd)
        }
        return nil
    }

    /// The path of a node below `base` — `base`, a slash, then the names from the root down
    /// (just `base` for the root) — with `name` appended. A `base` of "" gives the path relative
    /// to the root ("" for the root itself); "/" gives "/" and the names.
    func path(of id: NodeID, appending name: String? = nil, under base: String = "") -> String {
        state.withLock { state in
            // One walk up the parents into a buffer on the stack, then the names written into
            // one allocation. Deeper than the buffer, a second walk fetches the rest.
            withUnsafeTemporaryAllocation(of: Unmanaged<Inode>.self, capacity: 32) { ancestors -> String in
                var below = name.map { $0.utf8.count } ?? -1
                var depth = 0
                var current = id
                while current != Self.rootID, let inode = state.byID[current], depth < 4096 {
                    if depth < ancestors.count { ancestors[depth] = Unmanaged.passUnretained(inode) }
                    below += inode.name.utf8.count + 1
                    depth += 1
                    current = inode.parent
                }
                guard below > 0 else { return base }
                // The root's "/" is the slash before the first name.
                let prefix = base == "/" ? "" : base
                let total = base.isEmpty ? below : prefix.utf8.count + 1 + below
                return String(unsafeUninitializedCapacity: total) { buffer in
                    var end = total
                    func put(_ component: String) {
                        component.withBorrowedUTF8 { bytes in
                            end -= bytes.count
                            _ = UnsafeMutableBufferPointer(rebasing: buffer[end..<end + bytes.count]).initialize(
                                fromContentsOf: bytes)
                        }
                        if end > 0 { end -= 1; buffer[end] = UInt8(ascii: "/") }
                    }
                    if let name { put(name) }
                    for index in 0..<min(depth, ancestors.count) { put(ancestors[index].takeUnretainedValue().name) }
                    if depth > ancestors.count {
                        var current = ancestors[ancestors.count - 1].takeUnretainedValue().parent
                        for _ in ancestors.count..<depth {
                            guard let inode = state.byID[current] else { break }
                            put(inode.name)
                            current = inode.parent
                        }
                    }
                    prefix.withBorrowedUTF8 { bytes in
                        _ = UnsafeMutableBufferPointer(rebasing: buffer[..<bytes.count]).initialize(
                            fromContentsOf: bytes)
                    }
                    return total
                }
            }
        }
    }

    /// The node now at `name` in `parent` moved there from `source` by a rename through the
    /// mount. A file with hard links renamed by another name than the one it is known by keeps
    /// that one, and the new name is one of its others.
    func moved(_ id: NodeID, from source: (parent: NodeID, name: String), to parent: NodeID, name: String) {
        state.withLock { state in
            guard let inode = state.byID[id] else { return }
            if inode.isDirectory { directoryNamesGeneration.increment() }
            let from = Inode.Place(parent: source.parent, name: source.name),
                to = Inode.Place(parent: parent, name: name)
            changingPlaces(of: inode) { inode in
                inode.otherPlaces.removeAll { $0 == from }
                if inode.isDirectory || inode.knownPlace == from {
                    inode.place(at: to)
                } else {
                    inode.addOtherPlace(to)
                }
            }
        }
    }

    /// `name` in `parent` is about to be removed through the mount (`parentFD` is the parent's
    /// descriptor). A file with hard links known by that name is known by another of its names
    /// from then on; otherwise its path would stay a name that is gone, and a new file made
    /// there would conflict with it. A look at the name only while such files are known.
    func nameGoing(_ name: String, in parent: Inode, parentFD: Int32) {
        guard nodesWithOtherPlaces.load(ordering: .relaxed) > 0 else { return }
        var info = stat()
        guard FileSystemName.withCString(name, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            return
        }
        nameRemoved(name, in: parent.id, device: UInt64(info.st_dev), number: UInt64(info.st_ino))
    }

    /// An O_PATH descriptor of `name` in `parentFD` (found as `info`), which is about to be
    /// unlinked, when the unlink itself would free its inode: its last name, and no descriptor
    /// of the mount's holds it (a file looked up or made and never opened). Closed after the
    /// unlink on the closer thread (`closeLater`), it takes the freeing (a big file's blocks,
    /// the journal's work) off the request, as a node's own descriptor does, closed when the
    /// kernel forgets the node.
    func holdForUnlink(_ name: String, _ info: stat, parentFD: Int32) -> Int32? {
        guard info.st_nlink == 1, info.st_mode & S_IFMT != S_IFDIR else { return nil }
        let key = BackingInode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        let heldByItsNode = state.withLock { state in
            state.byKey[key].flatMap { state.byID[$0] }.map { state.slots.slot(of: $0) != nil } ?? false
        }
        guard !heldByItsNode else { return nil }
        let fd = FileSystemName.withCString(name) { openat(parentFD, $0, CFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        return fd >= 0 ? fd : nil
    }

    /// Closes `fd` soon, on the closer thread.
    func closeLater(_ fd: Int32) { closeLater([fd]) }

    /// `name` in `parent`, which named the item (`device`, `number`), was removed or replaced
    /// through the mount: see `nameGoing`.
    func nameRemoved(_ name: String, in parent: NodeID, device: UInt64, number: UInt64) {
        guard nodesWithOtherPlaces.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            guard let id = state.byKey[BackingInode(device: device, number: number)], let inode = state.byID[id],
                !inode.otherPlaces.isEmpty
            else { return }
            let gone = Inode.Place(parent: parent, name: name)
            changingPlaces(of: inode) { inode in
                if inode.knownPlace == gone {
                    inode.place(at: inode.otherPlaces[inode.otherPlaces.count - 1])
                } else {
                    inode.otherPlaces.removeAll { $0 == gone }
                }
            }
        }
    }

    /// The parent and name a node was last reached by.
    func placement(of inode: Inode) -> (parent: NodeID, name: String) {
        state.withLock { _ in (inode.parent, inode.name) }
    }

    /// The node known for (device, inode number), if any.
    func node(device: UInt64, number: UInt64) -> Inode? {
        state.withLock { state in state.byKey[BackingInode(device: device, number: number)].flatMap { state.byID[$0] } }
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
    /// Whether `inode` holds a descriptor now (the root always does).
    func holdsDescriptor(_ inode: Inode) -> Bool {
        inode.id == Self.rootID || state.withLock { $0.slots.slot(of: inode) != nil }
    }
    /// Descriptors open for inodes, the root's aside.
    var openDescriptors: Int { state.withLock { $0.slots.open } }
}
