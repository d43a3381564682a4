import Coordination

/// One intent of a kernel request: an access of an item, named by its node, or by the directory
/// that holds it and its name there (the engine's `Intent` before its path is spelled out).
struct ItemIntent {
    var kind: AccessKind
    /// The item itself, or the directory that holds `name`.
    var node: Inode
    /// Empty for `node` itself: the kernel never names an item so. Not an optional: copying a
    /// `String?` runs the optional's value witnesses, some ten cache lines of code.
    var name: String = ""
    var isDirectory: Bool
    /// The kernel keeps the item's inode locked while the request waits (a truncation): every
    /// write of the file waits behind it, as others' requests about names in a directory wait
    /// behind a request about one of them.
    var inodeLocked = false

    /// A destructive write on a directory: the engine makes it wait for everything held inside
    /// (outside packages; here, where packages are not looked at, everywhere).
    var coversSubtree: Bool {
        guard isDirectory, case .writing(let options) = kind else { return false }
        return !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
    }

    /// The intent as strict mode takes it: every writer excludes every other open (no appending
    /// or writing in place beside others, U1, U2), and no open file lets a change pass it.
    var strict: ItemIntent {
        var strict = self
        switch kind {
        case .writing(let options):
            if !options.isDisjoint(with: [.appendingOnly, .sharingWriters]) {
                strict.kind = .writing([])
            } else if !options.isDisjoint(with: [.passesOpenReads, .passesAppends]) {
                strict.kind = .writing(options.subtracting([.passesOpenReads, .passesAppends]))
            }
        case .reading(let options):
            if options.contains(.throughOpenFile) { strict.kind = .reading(options.subtracting(.throughOpenFile)) }
        }
        return strict
    }
}
