/// How a held or requested intent locks: where, and in which mode. Derived from an `Intent`.
///
/// This file holds the one conflict predicate of the engine; every blocking rule is here.
struct LockMode: Hashable, Sendable {
    /// The item the lock is on: the outermost enclosing file package, or the item itself (C17).
    var path: ItemPath
    var kind: LockKind

    init(_ intent: Intent) {
        path = Self.lockedPath(intent)
        kind = LockKind(intent)
    }

    /// The item an intent locks: the outermost enclosing package, or the item itself (C17).
    static func lockedPath(_ intent: borrowing Intent) -> ItemPath {
        intent.target.enclosingPackages.first ?? intent.target.path
    }

    var coversSubtree: Bool { kind.coversSubtree }

    /// The conflict predicate: may `self` and `other`, held by different coordinators, coexist?
    func conflicts(with other: LockMode) -> Bool {
        if path == other.path { return kind.conflicts(onTheSameItemWith: other.kind) }
        // C18, C19
        if path.isAncestor(of: other.path) { return kind.coversSubtree && !kind.leavesUntouched(other.kind) }
        if other.path.isAncestor(of: path) { return other.kind.coversSubtree && !other.kind.leavesUntouched(kind) }
        return false
    }
}

/// A lock's mode without its place: what a hold keeps beside the item it is filed under. It
/// holds no reference, so holds are copied and dropped without touching a reference count.
struct LockKind: Hashable, Sendable {
    var isWrite: Bool
    /// A read with immediatelyAvailableMetadataOnly (O3) or a write with
    /// contentIndependentMetadataOnly (O9).
    var metadataOnly: Bool
    /// A write with forDeleting, forMoving or forReplacing: it also stops metadata-only reads (O3).
    var destructive: Bool
    /// A destructive write on a directory: it conflicts with everything inside it (C19, O11).
    var coversSubtree: Bool
    /// An appending write (U1): readers share with it.
    var appends = false
    /// An appending write or a write in place among writers that share (U1, U2): such
    /// writes share with each other.
    var sharesWithWriters = false
    /// A read through an unmodified program's open descriptor (`ReadingOptions.throughOpenFile`).
    var readsOpenFile = false
    /// A change a mount makes that reads through open descriptors outlive
    /// (`WritingOptions.passesOpenReads`).
    var passesOpenReads = false
    /// A change a mount makes that leaves appenders appending (`WritingOptions.passesAppends`).
    var passesAppends = false

    init(_ intent: borrowing Intent) {
        switch intent.kind {
        case .reading(let options):
            isWrite = false
            metadataOnly = options.contains(.immediatelyAvailableMetadataOnly)
            destructive = false
            readsOpenFile = options.contains(.throughOpenFile)
        case .writing(let options):
            isWrite = true
            metadataOnly = options.contains(.contentIndependentMetadataOnly)
            destructive = !options.isDisjoint(with: WritingOptions.destructive)
            appends = options.contains(.appendingOnly)
            sharesWithWriters = appends || options.contains(.sharingWriters)
            passesOpenReads = options.contains(.passesOpenReads)
            passesAppends = options.contains(.passesAppends)
        }
        if !intent.target.enclosingPackages.isEmpty {
            // Inside a package every access is the same kind of access to the package; deleting
            // or moving something inside it is a plain write to the package (P22), which changes
            // the document the other opens have open: no open file lets it pass.
            destructive = false
            coversSubtree = false
            passesOpenReads = false
            passesAppends = false
        } else {
            coversSubtree = destructive && intent.target.isDirectory
        }
    }

    /// Two locks on one item, held by different coordinators: may they coexist?
    func conflicts(onTheSameItemWith other: LockKind) -> Bool {
        if !isWrite && !other.isWrite { return false }  // C3: readers share
        if leavesUntouched(other) || other.leavesUntouched(self) { return false }
        if destructive || other.destructive { return true }  // O3: even metadata reads wait
        let (writer, reader) = isWrite ? (self, other) : (other, self)
        if !reader.isWrite {
            if writer.appends { return false }  // U1: a reader sees a prefix
            // A metadata-only read waits only for destructive writes (O3); a metadata-only write
            // does not wait for reads of the contents (O9).
            return !(reader.metadataOnly || writer.metadataOnly)
        }
        if sharesWithWriters && other.sharesWithWriters { return false }  // U2: they order themselves
        return true  // C2: writers exclude writers
    }

    /// Whether this change, made by a mount in one call for an unmodified program, leaves
    /// `other`, an open descriptor's access, doing what it did: a read reads on what it opened
    /// after a name change or a log's rotation; an appender appends on after a move or a log's
    /// truncation. (Apple's rules know no such access: a coordinated read or write carries no
    /// mark, and a deletion or a move still waits for it, C2, O5, O6.)
    func leavesUntouched(_ other: LockKind) -> Bool {
        (passesOpenReads && other.readsOpenFile) || (passesAppends && other.appends)
    }
}
