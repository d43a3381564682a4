import Coordination

extension Filesystem {
    /// The name gates a request held for its call passed, beside the engine's screened grants:
    /// `second` only when it locks two names on different gates.
    struct Passage {
        let first: Int
        let second: Int?
    }

    /// Lets a request held for its call pass while the engine holds nothing but screened
    /// grants and no file is held open by a name it locks (`NameGates`); nil, having counted
    /// nothing, when it must be coordinated.
    func passBesideOpenFiles(_ wanted: Wanted, _ other: Wanted?) -> Passage? {
        // An rmdir or a directory's rename conflicts with files open anywhere below it.
        if wanted.coversSubtree || other?.coversSubtree == true { return nil }
        guard engine.passQuietly(.onlyScreenedGrants) else { return nil }
        if let first = gate(of: wanted), nameGates.enter(first) {
            guard let other else { return Passage(first: first, second: nil) }
            if let second = gate(of: other) {
                if second == first { return Passage(first: first, second: nil) }
                // Entering never waits, so taking two gates in either order cannot deadlock.
                if nameGates.enter(second) { return Passage(first: first, second: second) }
            }
            nameGates.leave(first)
        }
        engine.endPassingQuietly(.onlyScreenedGrants)
        return nil
    }

    func endPassing(_ passage: Passage) {
        if let second = passage.second { nameGates.leave(second) }
        nameGates.leave(passage.first)
        engine.endPassingQuietly(.onlyScreenedGrants)
    }

    /// The gate of the name `wanted` locks: the name it names in its node, or the item's own
    /// place, as the engine's path for it is spelled (`targetAndPlace`). Nil for the root.
    private func gate(of wanted: Wanted) -> Int? {
        if !wanted.name.isEmpty { return nameGates.index(of: wanted.name, in: wanted.node.id) }
        if wanted.node.id == InodeTable.rootID { return nil }
        let (directory, name) = inodes.placement(of: wanted.node)
        return nameGates.index(of: name, in: directory)
    }
}

extension Filesystem.Wanted {
    /// A destructive write on a directory: the engine makes it wait for everything held inside
    /// (outside packages; here, where packages are not looked at, everywhere).
    var coversSubtree: Bool {
        guard isDirectory, case .writing(let options) = kind else { return false }
        return !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
    }
}
