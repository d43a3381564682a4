/// The directories a watch of one mark per directory has marked, by the file handle fanotify
/// reports each with, and where each lies: its parent's handle and its name. A reported handle
/// names its path without being opened, which takes a privilege (CAP_DAC_READ_SEARCH) the
/// mount may not have. Renames and removals seen by the watch, the mount's own too, keep it
/// right; a directory whose parent is not known here is not below the backing root.
struct WatchedDirectories {
    typealias Handle = [UInt8]

    private struct Place: Hashable {
        let parent: Handle
        let name: String
    }

    private struct Entry {
        /// Nil for the backing root.
        var place: Place?
        let device: UInt64
        let number: UInt64
    }

    private var entries: [Handle: Entry] = [:]
    private var byPlace: [Place: Handle] = [:]

    let root: Handle
    var count: Int { entries.count }

    init(root: Handle, device: UInt64, number: UInt64) {
        self.root = root
        entries[root] = Entry(place: nil, device: device, number: number)
    }

    func contains(_ handle: Handle) -> Bool { entries[handle] != nil }

    /// Where the directory `handle` lies below the root ("" for the root); nil when it does not.
    func directory(_ handle: Handle) -> BackingWatch.Directory? {
        guard let entry = entries[handle] else { return nil }
        var names: [String] = []
        var place = entry.place
        while let step = place {
            names.append(step.name)
            guard let parent = entries[step.parent], names.count < 4096 else { return nil }
            place = parent.place
        }
        return BackingWatch.Directory(relative: names.reversed().joined(separator: "/"), device: entry.device, number: entry.number)
    }

    /// The handle of the directory `name` in `parent`, when it is known.
    func handle(of name: String, in parent: Handle) -> Handle? { byPlace[Place(parent: parent, name: name)] }

    mutating func add(_ handle: Handle, name: String, in parent: Handle, device: UInt64, number: UInt64) {
        let place = Place(parent: parent, name: name)
        if let old = entries[handle]?.place { byPlace[old] = nil }
        if let previous = byPlace[place], previous != handle { entries[previous] = nil }
        entries[handle] = Entry(place: place, device: device, number: number)
        byPlace[place] = handle
    }

    /// A directory renamed: from `name` in `parent` to `newName` in `newParent`. False when it
    /// was not known (it came from outside the root, and is to be marked).
    mutating func move(_ name: String, in parent: Handle, to newName: String, in newParent: Handle) -> Bool {
        let old = Place(parent: parent, name: name)
        guard let handle = byPlace.removeValue(forKey: old) else { return false }
        let new = Place(parent: newParent, name: newName)
        if let replaced = byPlace[new], replaced != handle { entries[replaced] = nil }
        entries[handle]?.place = new
        byPlace[new] = handle
        return true
    }

    /// A directory removed, or moved out of the root: its mark ends with it, or stays unused.
    mutating func remove(_ name: String, in parent: Handle) {
        guard let handle = byPlace.removeValue(forKey: Place(parent: parent, name: name)) else { return }
        entries[handle] = nil
    }
}
