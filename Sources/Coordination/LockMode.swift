/// How a held or requested intent locks: where, and in which mode. Derived from an `Intent`.
///
/// This file holds the one conflict predicate of the engine; every blocking rule is here.
struct LockMode: Hashable, Sendable {
    /// The item the lock is on: the outermost enclosing file package, or the item itself (C17).
    var path: ItemPath
    var isWrite: Bool
    /// A read with immediatelyAvailableMetadataOnly (O3) or a write with
    /// contentIndependentMetadataOnly (O9).
    var metadataOnly: Bool
    /// A write with forDeleting, forMoving or forReplacing: it also stops metadata-only reads (O3).
    var destructive: Bool
    /// A destructive write on a directory: it conflicts with everything inside it (C19, O11).
    var coversSubtree: Bool

    init(_ intent: Intent) {
        let target = intent.target
        switch intent.kind {
        case .reading(let options):
            isWrite = false
            metadataOnly = options.contains(.immediatelyAvailableMetadataOnly)
            destructive = false
        case .writing(let options):
            isWrite = true
            metadataOnly = options.contains(.contentIndependentMetadataOnly)
            destructive = !options.isDisjoint(with: WritingOptions.destructive)
        }
        if let package = target.enclosingPackages.first {
            // Inside a package every access is the same kind of access to the package; deleting
            // or moving something inside it is a plain write to the package (P22).
            path = package
            destructive = false
            coversSubtree = false
        } else {
            path = target.path
            coversSubtree = destructive && target.isDirectory
        }
    }

    /// The conflict predicate: may `self` and `other`, held by different coordinators, coexist?
    func conflicts(with other: LockMode) -> Bool {
        if path == other.path { return Self.sameItemConflict(self, other) }
        if path.isAncestor(of: other.path) { return coversSubtree }   // C18, C19
        if other.path.isAncestor(of: path) { return other.coversSubtree }
        return false
    }

    private static func sameItemConflict(_ a: LockMode, _ b: LockMode) -> Bool {
        if !a.isWrite && !b.isWrite { return false }                    // C3: readers share
        if a.destructive || b.destructive { return true }               // O3: even metadata reads wait
        let (writer, other) = a.isWrite ? (a, b) : (b, a)
        if !other.isWrite {
            // A metadata-only read waits only for destructive writes (O3); a metadata-only write
            // does not wait for reads of the contents (O9).
            return !(other.metadataOnly || writer.metadataOnly)
        }
        return true                                                     // C2: writers exclude writers
    }
}
