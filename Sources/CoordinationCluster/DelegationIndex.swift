/// The replica's delegation keys (`Delegations`), by key and by path: a tree of the store's path
/// components, each node with the keys of its own path and counts of the keys at and below it,
/// so that what a request asks costs the depth of its path, not the number of keys.
///
/// Two delegations conflict only when one's item holds the other's or is it (`Delegations.conflict`):
/// the keys that can conflict with one of a path are on the nodes above it, on its own, and
/// below it, and the counts (every key, the writes, this run's, this run's writes) pass over
/// subtrees that hold none of those asked for. Paths split at "/" as `Delegations.contains`
/// reads them, empty components and all, so that "below" here is `contains` there.
///
/// Every change of a key is recorded (`takeChanges`) for the recalls it may make (`recalls`):
/// only the keys around a changed one are looked at again.
struct DelegationIndex: Sendable {
    typealias Entry = Delegations.Entry

    /// A key put, replaced or removed: as it was (`old`) and is (`new`).
    struct Change: Sendable, Equatable {
        var key: [UInt8]
        var old: Entry?
        var new: Entry?
    }

    /// A recall to tell: `held`, this run's and in nobody's way, is wanted by `wanted`.
    struct Pair: Sendable, Equatable {
        var heldKey: [UInt8]
        var held: Entry
        var wantedKey: [UInt8]
        var wanted: Entry
    }

    /// Whose keys a search looks at: a subtree with none of them is passed over.
    enum Whose: Sendable { case anyone, mine, others }

    private struct Counts: Sendable {
        var all = 0, writes = 0, mine = 0, mineWrites = 0
        /// Writers that share (`Mode.sharesWriters`), everyone's and this run's.
        var sharing = 0, mineSharing = 0

        mutating func add(_ mode: Delegations.Mode, mine: Bool, _ step: Int) {
            all += step
            if mode.writes { writes += step }
            if mine { self.mine += step }
            if mode.writes && mine { mineWrites += step }
            if mode.sharesWriters { sharing += step }
            if mode.sharesWriters && mine { mineSharing += step }
        }

        /// Whether another holder has a key that is not a writer that shares.
        var othersBesideSharingWriters: Bool { all - mine > sharing - mineSharing }

        func holds(_ whose: Whose, writesOnly: Bool) -> Bool {
            switch (whose, writesOnly) {
            case (.anyone, false): all > 0
            case (.anyone, true): writes > 0
            case (.mine, false): mine > 0
            case (.mine, true): mineWrites > 0
            case (.others, false): all > mine
            case (.others, true): writes > mineWrites
            }
        }
    }

    private struct Node: Sendable {
        var name: String
        var parent: Int
        var children: [String: Int] = [:]
        /// The keys of exactly this node's path (a few: one per host and mode at most).
        var keys: [[UInt8]] = []
        /// Of the keys at this node and below it.
        var counts = Counts()
    }

    /// This run: its keys are `mine`, every other holder's (another run of this host's too) `others`.
    let host: String
    let lease: Int64
    /// Node 0 is the store's root (the path ""); a node whose subtree holds no key is removed
    /// at once, so every other node has a key at or below it.
    private var nodes: [Node] = [Node(name: "", parent: -1)]
    private var unused: [Int] = []
    private var byKey: [[UInt8]: (entry: Entry, node: Int)] = [:]
    private var changes: [Change] = []
    /// The other holders' presences: none, the common case, and nobody is asked anything.
    private(set) var othersPresences = 0

    init(host: String, lease: Int64) {
        self.host = host
        self.lease = lease
    }

    // MARK: Keys

    subscript(key: [UInt8]) -> Entry? { byKey[key]?.entry }

    var count: Int { byKey.count }

    /// Every key and its entry, in no order.
    var all: [(key: [UInt8], entry: Entry)] { byKey.map { ($0.key, $0.value.entry) } }

    func isMine(_ entry: Entry) -> Bool { entry.host == host && entry.lease == lease }

    /// Puts `entry` under `key`, in place of what was there.
    mutating func put(_ key: [UInt8], _ entry: Entry) {
        let old = byKey[key]
        if old?.entry == entry { return }
        if old != nil { detach(key) }
        let place = node(creating: entry.path)
        nodes[place].keys.append(key)
        tally(entry, at: place, 1)
        byKey[key] = (entry, place)
        changes.append(Change(key: key, old: old?.entry, new: entry))
    }

    /// Removes `key`: its entry, if it had one.
    @discardableResult
    mutating func remove(_ key: [UInt8]) -> Entry? {
        guard let old = byKey[key]?.entry else { return nil }
        detach(key)
        byKey[key] = nil
        changes.append(Change(key: key, old: old, new: nil))
        return old
    }

    /// The changes since the last call, oldest first.
    mutating func takeChanges() -> [Change] {
        defer { changes = [] }
        return changes
    }

    // MARK: Questions

    /// Whether `other`, another holder's key made before `entry` and not answered, is in its
    /// way (`Delegations.inTheWay`).
    private func blocks(_ other: Entry, _ entry: Entry) -> Bool {
        !other.isSameHolder(as: entry) && other.revision < entry.revision && other.answer == nil
            && Delegations.inTheWay(other, of: entry)
    }

    /// Whether only writes can be in the way of a key of `mode`, or wait for one: a read's and
    /// a presence's are, and a read waits for nothing else. (A presence is in a question's way.)
    private static func meetsWritesOnly(inTheWayOf mode: Delegations.Mode) -> Bool {
        mode == .read || mode == .presence
    }

    /// The other holders' keys made before `entry` that are in its way: what it waits for.
    func blockers(of entry: Entry) -> [Entry] {
        var found: [Entry] = []
        let writesOnly = Self.meetsWritesOnly(inTheWayOf: entry.mode)
        forEachRelated(to: entry.path, isMine(entry) ? .others : .anyone, writesOnly: writesOnly) { _, other in
            if blocks(other, entry) { found.append(other) }
            return true
        }
        return found
    }

    /// Whether `entry` has blockers: it is not held (yet).
    func isBlocked(_ entry: Entry) -> Bool {
        var blocked = false
        let writesOnly = Self.meetsWritesOnly(inTheWayOf: entry.mode)
        forEachRelated(to: entry.path, isMine(entry) ? .others : .anyone, writesOnly: writesOnly) { _, other in
            blocked = blocks(other, entry)
            return !blocked
        }
        return blocked
    }

    /// The other holders' keys made after `held` that it is in the way of and that recall (not
    /// tentative, not answered).
    func wanting(_ held: Entry) -> [(key: [UInt8], entry: Entry)] {
        var found: [(key: [UInt8], entry: Entry)] = []
        forEachRelated(to: held.path, isMine(held) ? .others : .anyone, writesOnly: held.mode == .read) { key, other in
            if !other.isSameHolder(as: held) && other.revision > held.revision && !other.isTentative
                && other.answer == nil && Delegations.inTheWay(held, of: other)
            {
                found.append((key, other))
            }
            return true
        }
        return found
    }

    /// Whether another holder has a presence of exactly `path` (one walk down it).
    func othersPresent(at path: String) -> Bool {
        guard let found = node(of: path) else { return false }
        return nodes[found].keys.contains { key in
            guard let entry = byKey[key]?.entry else { return false }
            return entry.mode == .presence && !isMine(entry)
        }
    }

    /// The recalls `changes` may have made: pairs of this run's key held (nothing before it
    /// in its way) and another holder's later key that conflicts with it, where the change made
    /// the pair (the wanted key came, the held key came, or a key in the held one's way went).
    /// Together with the pairs of the changes before, every such pair of the index.
    func recalls(after changes: [Change]) -> [Pair] {
        var pairs: [Pair] = []
        // A question, or a key answered, is nobody's to give back.
        func tellAll(_ key: [UInt8], _ held: Entry) {
            guard held.mode != .asking, held.answer == nil, !isBlocked(held) else { return }
            for (wantedKey, wanted) in wanting(held) {
                pairs.append(Pair(heldKey: key, held: held, wantedKey: wantedKey, wanted: wanted))
            }
        }
        for change in changes {
            // A key changed again later is seen in that change.
            if let new = change.new, byKey[change.key]?.entry == new {
                if isMine(new) {
                    tellAll(change.key, new)
                } else if !new.isTentative && new.answer == nil {
                    let writesOnly = Self.meetsWritesOnly(inTheWayOf: new.mode)
                    forEachRelated(to: new.path, .mine, writesOnly: writesOnly) { key, held in
                        if held.revision < new.revision && held.mode != .asking && held.answer == nil
                            && Delegations.inTheWay(held, of: new) && !isBlocked(held)
                        {
                            pairs.append(Pair(heldKey: key, held: held, wantedKey: change.key, wanted: new))
                        }
                        return true
                    }
                }
            }
            if let old = change.old, !isMine(old) {
                // This run's keys it was in the way of may be held now.
                forEachRelated(to: old.path, .mine, writesOnly: old.mode == .read) { key, held in
                    if held.revision > old.revision { tellAll(key, held) }
                    return true
                }
            }
        }
        return pairs
    }

    /// The outermost directory above `path` (the store's root aside) in which and above which
    /// no other holder has a key that conflicts with `mode` there, and that `excluded` does not
    /// refuse; `path` itself when there is none. One walk down the path. Writers that share
    /// (`Mode.sharesWriters`) share directories too: only other keys than such writers' are in
    /// their way (a reader's too, which an appender would share: one rule for both).
    func outermostFree(for path: String, _ mode: Delegations.Mode, unless excluded: (String) -> Bool) -> String {
        guard !path.isEmpty else { return path }
        let writesOnly = !mode.writes, sharing = mode.sharesWriters
        func inTheWay(atOrBelow node: Int) -> Bool {
            sharing
                ? nodes[node].counts.othersBesideSharingWriters
                : nodes[node].counts.holds(.others, writesOnly: writesOnly)
        }
        func inTheWay(at node: Int) -> Bool {
            if !sharing { return hasKeys(at: node, .others, writesOnly: writesOnly) }
            return !visit(node, .others, false) { _, other in other.mode.sharesWriters }
        }
        let components = path.split(separator: "/", omittingEmptySubsequences: false)
        var node: Int? = 0
        // Whether another holder's key in a directory above the candidate is in the way: then
        // it is in the way of every candidate below too.
        var above = inTheWay(at: 0)
        for component in components.dropLast() {
            if above { return path }
            node = node.flatMap { nodes[$0].children[String(component)] }
            let candidate = String(path[..<component.endIndex])
            // (A path that begins with "/" has "", the store's root, for its first directory.)
            let subtree = candidate.isEmpty ? 0 : node
            let atOrBelow = subtree.map(inTheWay(atOrBelow:)) ?? false
            if !atOrBelow && !excluded(candidate) { return candidate }
            // (Nothing above it was in the way, or this would not be asked.)
            if let node { above = inTheWay(at: node) }
        }
        return path
    }

    /// Calls `body` with each key of `whose` (and only the writes, if `writesOnly`) related to
    /// `path`: in a directory above it, at it, or below it; until `body` answers false.
    /// Answers whether it went through all.
    @discardableResult
    func forEachRelated(to path: String, _ whose: Whose, writesOnly: Bool, _ body: ([UInt8], Entry) -> Bool) -> Bool {
        // Down the path as far as the index has it: the nodes above it, then its own.
        var node = 0
        var reached = true
        if !visit(0, whose, writesOnly, body) { return false }
        if !path.isEmpty {
            for component in path.split(separator: "/", omittingEmptySubsequences: false) {
                guard let child = nodes[node].children[String(component)] else {
                    reached = false
                    break
                }
                node = child
                if !visit(node, whose, writesOnly, body) { return false }
            }
        }
        guard reached else { return true }
        // Below it, past the subtrees with nothing asked for.
        var stack = nodes[node].children.values.filter { nodes[$0].counts.holds(whose, writesOnly: writesOnly) }
        while let next = stack.popLast() {
            if !visit(next, whose, writesOnly, body) { return false }
            for child in nodes[next].children.values where nodes[child].counts.holds(whose, writesOnly: writesOnly) {
                stack.append(child)
            }
        }
        return true
    }

    // MARK: The tree

    private func accepts(_ entry: Entry, _ whose: Whose, _ writesOnly: Bool) -> Bool {
        if writesOnly && !entry.mode.writes { return false }
        switch whose {
        case .anyone: return true
        case .mine: return isMine(entry)
        case .others: return !isMine(entry)
        }
    }

    /// `body` with the keys of `node` itself that are asked for.
    private func visit(_ node: Int, _ whose: Whose, _ writesOnly: Bool, _ body: ([UInt8], Entry) -> Bool) -> Bool {
        for key in nodes[node].keys {
            guard let entry = byKey[key]?.entry, accepts(entry, whose, writesOnly) else { continue }
            if !body(key, entry) { return false }
        }
        return true
    }

    private func hasKeys(at node: Int, _ whose: Whose, writesOnly: Bool) -> Bool {
        !visit(node, whose, writesOnly) { _, _ in false }
    }

    /// The node of `path`, where the index has one.
    private func node(of path: String) -> Int? {
        var node = 0
        if path.isEmpty { return node }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            guard let child = nodes[node].children[String(component)] else { return nil }
            node = child
        }
        return node
    }

    /// The node of `path`, made with the nodes above it where missing.
    private mutating func node(creating path: String) -> Int {
        var node = 0
        if path.isEmpty { return node }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            let name = String(component)
            if let child = nodes[node].children[name] {
                node = child
                continue
            }
            let made: Int
            if let free = unused.popLast() {
                nodes[free] = Node(name: name, parent: node)
                made = free
            } else {
                nodes.append(Node(name: name, parent: node))
                made = nodes.count - 1
            }
            nodes[node].children[name] = made
            node = made
        }
        return node
    }

    /// Counts `entry`, of `node`, in (`step` 1) or out (-1) at it and above it.
    private mutating func tally(_ entry: Entry, at node: Int, _ step: Int) {
        let mine = isMine(entry)
        if entry.mode == .presence && !mine { othersPresences += step }
        var current = node
        while current >= 0 {
            nodes[current].counts.add(entry.mode, mine: mine, step)
            current = nodes[current].parent
        }
    }

    /// Takes `key` off its node, and the nodes left with no key at or below them off the tree.
    private mutating func detach(_ key: [UInt8]) {
        guard let found = byKey[key] else { return }
        let (entry, node) = (found.entry, found.node)
        if let index = nodes[node].keys.firstIndex(of: key) { nodes[node].keys.remove(at: index) }
        tally(entry, at: node, -1)
        var current = node
        while current > 0 && nodes[current].counts.all == 0 {
            let parent = nodes[current].parent
            nodes[parent].children[nodes[current].name] = nil
            nodes[current] = Node(name: "", parent: -1)
            unused.append(current)
            current = parent
        }
    }
}
