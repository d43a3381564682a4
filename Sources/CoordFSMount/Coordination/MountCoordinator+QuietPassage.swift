import LinuxSystem
import Coordination

extension MountCoordinator {
    /// How a request held for its call passed the quiet gates.
    enum QuietPassage {
        /// Through the engine's first gate: it held nothing.
        case nothingHeld
        /// Through its second gate, beside gated grants, and the gates of the names the
        /// request locks (`second` only when it locks two names on different gates).
        case besideOpenFiles(first: Int, second: Int?)
    }

    /// Lets a request held for its call pass while the engine holds nothing, or nothing but
    /// gated grants while no file is held open by a name it locks (`NameGates`); nil,
    /// having counted nothing, when it must be coordinated. Counted in the statistics.
    func passQuietly(_ wanted: ItemIntent, _ other: ItemIntent?) -> QuietPassage? {
        if engine.passQuietly() {
            statistics.passedQuietly.add()
            return .nothingHeld
        }
        // An rmdir or a directory's rename conflicts with files open anywhere below it.
        if wanted.coversSubtree || other?.coversSubtree == true { return nil }
        guard engine.passQuietly(.onlyGatedGrants) else { return nil }
        if let first = gate(of: wanted), nameGates.enter(first) {
            // nil: no second item; .some(nil): one whose gate is not known.
            let second: Int?? = other.map { gate(of: $0) }
            var passage: QuietPassage?
            switch second {
            case nil: passage = .besideOpenFiles(first: first, second: nil)
            case .some(let gate?) where gate == first: passage = .besideOpenFiles(first: first, second: nil)
            // Entering never waits, so taking two gates in either order cannot deadlock.
            case .some(let gate?) where nameGates.enter(gate): passage = .besideOpenFiles(first: first, second: gate)
            default: nameGates.leave(first)
            }
            if let passage {
                statistics.passedQuietly.add()
                statistics.passedBesideOpenFiles.add()
                return passage
            }
        }
        engine.endPassingQuietly(.onlyGatedGrants)
        return nil
    }

    /// Whether a request for the call may pass the quiet gate: its items lie on the backing's
    /// own filesystem, and that is local. Whoever closes the gate waits for the requests that
    /// passed; one on a network filesystem could keep it waiting as long as its server takes.
    func mayPassQuietly(_ wanted: ItemIntent, _ other: ItemIntent?) -> Bool {
        filesystems.rootIsLocal && wanted.node.device == filesystems.rootDevice
            && (other.map { $0.node.device == filesystems.rootDevice } ?? true)
    }

    func endPassing(_ passage: QuietPassage) {
        switch passage {
        case .nothingHeld:
            engine.endPassingQuietly()
        case .besideOpenFiles(let first, let second):
            if let second { nameGates.leave(second) }
            nameGates.leave(first)
            engine.endPassingQuietly(.onlyGatedGrants)
        }
    }

    /// The gate of the name `wanted` locks: the name it names in its node, or the item's own
    /// place, as the engine's path for it is spelled (`targetAndPlace`). Nil for the root.
    private func gate(of wanted: ItemIntent) -> Int? {
        if !wanted.name.isEmpty { return nameGates.index(of: wanted.name, in: wanted.node.id) }
        if wanted.node.id == InodeTable.rootID { return nil }
        let (directory, name) = targets.inodes.placement(of: wanted.node)
        return nameGates.index(of: name, in: directory)
    }
}
