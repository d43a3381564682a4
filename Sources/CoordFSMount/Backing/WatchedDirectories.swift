/// The directories a watch of one mark per directory has marked, by the file handle fanotify
/// reports each with, and where each lies: its parent's handle and its name. A reported handle
/// names its path without being opened, which takes a privilege (CAP_DAC_READ_SEARCH) the
/// mount may not have. The watch's events name the directory they are about by its handle too,
/// so a directory renamed, exchanged with another or moved out and back stays itself, whatever
/// names were reused meanwhile. A directory whose parent is not known here is not below the
/// backing root.
struct WatchedDirectories {
    typealias Handle = [UInt8]

    private struct Entry {
        /// Nil for the backing root.
        var parent: Handle?
        var name: String
        let device: UInt64
        let number: UInt64
    }

    private var entries: [Handle: Entry] = [:]
    let root: Handle
    var count: Int { entries.count }

    init(root: Handle, device: UInt64, number: UInt64) {
        self.root = root
        entries[root] = Entry(parent: nil, name: "", device: device, number: number)
    }

    func contains(_ handle: Handle) -> Bool { entries[handle] != nil }

    /// Where the directory `handle` lies below the root ("" for the root); nil when it does not.
    func directory(_ handle: Handle) -> BackingWatch.Directory? {
        guard let entry = entries[handle] else { return nil }
        var names: [String] = []
        var parent = entry.parent
        while let step = parent {
            guard let above = entries[step], names.count < 4096 else { return nil }
            if above.parent != nil { names.append(above.name) }
            parent = above.parent
        }
        if entry.parent != nil { names.insert(entry.name, at: 0) }
        return BackingWatch.Directory(
            relative: names.reversed().joined(separator: "/"), device: entry.device, number: entry.number)
    }

    mutating func add(_ handle: Handle, name: String, in parent: Handle, device: UInt64, number: UInt64) {
        entries[handle] = Entry(parent: parent, name: name, device: device, number: number)
    }

    /// The directory `handle` renamed to `name` in `parent`. False when it was not known (it
    /// came from outside the root, and is to be marked).
    mutating func move(_ handle: Handle, to name: String, in parent: Handle) -> Bool {
        guard entries[handle] != nil else { return false }
        entries[handle]!.parent = parent
        entries[handle]!.name = name
        return true
    }

    /// A directory removed: its mark ends with it (an empty directory: nothing below it).
    mutating func remove(_ handle: Handle) {
        entries[handle] = nil
    }

    /// A directory moved out of the root, and every directory below it: their marks stay,
    /// unused, and they are marked anew if they come back.
    mutating func removeTree(_ handle: Handle) {
        guard entries[handle] != nil else { return }
        var below: Set<Handle> = [handle]
        var changed = true
        while changed {
            changed = false
            for (key, entry) in entries where !below.contains(key) {
                if let parent = entry.parent, below.contains(parent) { below.insert(key); changed = true }
            }
        }
        for key in below { entries[key] = nil }
    }
}
