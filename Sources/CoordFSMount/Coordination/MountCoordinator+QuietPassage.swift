import LinuxSystem
import Coordination

extension MountCoordinator {
    /// How a request held for its call passed the quiet gates.
    enum QuietPassage {
        /// Through the engine's first gate: it held nothing.
        case nothingHeld
        /// Through its second gate, beside gated grants if any, and the gates of the names the
        /// request locks (`second` only when it locks two names on different gates).
        case besideOpenFiles(first: Int, second: Int?)
    }

    /// Lets a request held for its call pass while the engine holds nothing, or nothing but
    /// gated grants while no file is held open by a name it locks (`NameGates`); nil,
    /// having counted nothing, when it must be coordinated. Counted in the statistics.
    ///
    /// A request that names its item in a directory takes the second way even while the engine
    /// holds nothing: whoever passed the first gate is waited for by the next open anywhere on
    /// the mount (its grant closes that gate), whoever passed the second only by an open of one
    /// of its names. Clients unlinking and creating in directories of their own then do not
    /// wait for each other.
    func passQuietly(_ wanted: ItemIntent, _ other: ItemIntent?) -> QuietPassage? {
        // An rmdir or a directory's rename conflicts with files open anywhere below it.
        let coversSubtree = wanted.coversSubtree || other?.coversSubtree == true
        // An item named by its node alone costs a look at its place to find its gate.
        let byName = !wanted.name.isEmpty
        if !coversSubtree && byName, let passage = passBesideOpenFiles(wanted, other) { return passage }
        if engine.passQuietly() {
            statistics.passedQuietly.add()
            return .nothingHeld
        }
        if coversSubtree || byName { return nil }
        return passBesideOpenFiles(wanted, other)
    }

    /// Passes the engine's second gate and the gates of the names the request locks, or counts
    /// nothing and returns nil.
    private func passBesideOpenFiles(_ wanted: ItemIntent, _ other: ItemIntent?) -> QuietPassage? {
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
                // Beside open files only if there are some: the first gate is closed.
                if !engine.quietPassage().isOpen { statistics.passedBesideOpenFiles.add() }
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
