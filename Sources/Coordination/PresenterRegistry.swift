/// What the engine keeps of a presenter. The presenter itself (an object, a socket client) lives
/// with the caller; the engine knows it by `PresenterID`.
public struct PresenterRecord: Hashable, Sendable {
    /// Whose presenter it is: that identity's own accesses never message it (C14).
    public var owner: CoordinatorIdentity
    /// The presented item; nil until it exists (C22, P1).
    public var path: ItemPath?
    /// The primary item of a secondary presenter (P3).
    public var primaryPath: ItemPath?
    /// The requests it answers. It is asked nothing else: an access that would ask it only
    /// those goes on at once, as with a presenter that consents at once, but without the wait.
    public var answers: PresenterRequest.Kinds

    public init(
        owner: CoordinatorIdentity, path: ItemPath?, primaryPath: ItemPath? = nil,
        answers: PresenterRequest.Kinds = .all
    ) {
        self.owner = owner
        self.path = path
        self.primaryPath = primaryPath
        self.answers = answers
    }
}

/// Presenters indexed by path in a tree, so that the presenters concerned by an access are found
/// in time proportional to the depth of its path and to the number found, never to the number
/// registered.
///
/// Every node is also in a table keyed by its path's hash. An item's presenters are one look-up,
/// and the walk over an item's ancestors hashes each prefix of the item's own spelling as it goes:
/// no string is made, and the walk stops at the first ancestor with nobody at or below it.
struct PresenterTree {
    final class Node {
        let path: ItemPath
        var presenters: [PresenterID] = []
        /// Presenters at this node and below; a node is dropped when it reaches zero.
        var subtreeCount = 0
        var children: [Node] = []
        /// The next node whose path has the same hash (nearly always nil).
        var sameHash: Node?

        init(path: ItemPath) { self.path = path }
    }

    private let root = Node(path: .root)
    /// Every node but the root, by `path.hashCode`.
    private var nodes: [Int: Node] = [:]

    var isEmpty: Bool { root.subtreeCount == 0 }

    mutating func insert(_ id: PresenterID, at path: ItemPath) {
        root.subtreeCount += 1
        var parent = root
        for (hash, spelling) in Self.chain(to: path) {
            let node: Node
            if let existing = find(hash, spelling) {
                node = existing
            } else {
                node = Node(path: ItemPath(uncheckedCanonical: spelling))
                node.sameHash = nodes[hash]
                nodes[hash] = node
                parent.children.append(node)
            }
            node.subtreeCount += 1
            parent = node
        }
        parent.presenters.append(id)
    }

    mutating func remove(_ id: PresenterID, at path: ItemPath) {
        guard let node = node(at: path), let index = node.presenters.firstIndex(of: id) else { return }
        node.presenters.remove(at: index)
        root.subtreeCount -= 1
        var parent = root
        for (hash, spelling) in Self.chain(to: path) {
            let child = find(hash, spelling)!
            child.subtreeCount -= 1
            if child.subtreeCount == 0 {
                parent.children.removeAll { $0 === child }
                unlink(child)
                // Everything below it is empty too, and goes with it.
                var stack = child.children
                while let below = stack.popLast() {
                    unlink(below)
                    stack.append(contentsOf: below.children)
                }
                nodes.releaseSpareCapacity()
                return
            }
            parent = child
        }
    }

    /// Presenters exactly at `path`.
    func presenters(at path: ItemPath) -> [PresenterID] {
        if isEmpty { return [] }
        return node(at: path)?.presenters ?? []
    }

    /// Presenters at each strict ancestor of `path`, nearest first. Allocates only for the
    /// ancestors that have presenters.
    func presentersAbove(_ path: ItemPath) -> [(ItemPath, [PresenterID])] {
        if isEmpty || path.isRoot { return [] }
        var found: [(ItemPath, [PresenterID])] = []
        if !root.presenters.isEmpty { found.append((.root, root.presenters)) }
        path.forEachAncestorPrefix { hash, spelling in
            guard let node = find(hash, spelling) else { return false }
            if !node.presenters.isEmpty { found.append((node.path, node.presenters)) }
            return true
        }
        return found.reversed()
    }

    /// Presenters strictly inside `path`, with their paths.
    func presentersInside(_ path: ItemPath) -> [(ItemPath, PresenterID)] {
        guard let start = node(at: path), start.subtreeCount > start.presenters.count else { return [] }
        var found: [(ItemPath, PresenterID)] = []
        var stack = start.children
        while let node = stack.popLast() {
            for id in node.presenters { found.append((node.path, id)) }
            stack.append(contentsOf: node.children)
        }
        return found
    }

    private func node(at path: ItemPath) -> Node? {
        if path.isRoot { return root }
        var string = path.string
        return string.withUTF8 { find(path.hashCode, $0) }
    }

    /// The node spelled `spelling`, whose hash is `hash`.
    private func find(_ hash: Int, _ spelling: UnsafeBufferPointer<UInt8>) -> Node? {
        var candidate = nodes[hash]
        while let node = candidate {
            if node.path.isSpelled(spelling) { return node }
            candidate = node.sameHash
        }
        return nil
    }

    /// The hash and spelling of every node from the root's child down to `path` (registering
    /// and removing: spellings are copied, these are not hot).
    private static func chain(to path: ItemPath) -> [(hash: Int, spelling: String)] {
        var chain: [(hash: Int, spelling: String)] = []
        path.forEachAncestorPrefix { hash, spelling in
            chain.append((hash, String(decoding: spelling, as: UTF8.self)))
            return true
        }
        if !path.isRoot { chain.append((path.hashCode, path.string)) }
        return chain
    }

    private func find(_ hash: Int, _ spelling: String) -> Node? {
        var spelling = spelling
        return spelling.withUTF8 { find(hash, $0) }
    }

    private mutating func unlink(_ node: Node) {
        let hash = node.path.hashCode
        if nodes[hash] === node {
            nodes[hash] = node.sameHash
        } else {
            var previous = nodes[hash]
            while let current = previous, current.sameHash !== node { previous = current.sameHash }
            previous?.sameHash = node.sameHash
        }
        node.sameHash = nil
    }
}
