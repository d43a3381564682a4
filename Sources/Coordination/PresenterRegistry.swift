/// What the engine keeps of a presenter. The presenter itself (an object, a socket client) lives
/// with the caller; the engine knows it by `PresenterID`.
public struct PresenterRecord: Hashable, Sendable {
    /// Whose presenter it is: that identity's own accesses never message it (C14).
    public var owner: CoordinatorIdentity
    /// The presented item; nil until it exists (C22, P1).
    public var path: ItemPath?
    /// The primary item of a secondary presenter (P3).
    public var primaryPath: ItemPath?

    public init(owner: CoordinatorIdentity, path: ItemPath?, primaryPath: ItemPath? = nil) {
        self.owner = owner
        self.path = path
        self.primaryPath = primaryPath
    }
}

/// Presenters indexed by path in a tree, so that the presenters concerned by an access are found
/// in time proportional to the depth of its path and to the number found, never to the number
/// registered.
struct PresenterTree {
    final class Node {
        var children: [String: Node] = [:]
        var presenters: [PresenterID] = []
        /// Presenters at this node and below.
        var subtreeCount = 0
    }

    private(set) var root = Node()

    var isEmpty: Bool { root.subtreeCount == 0 }

    mutating func insert(_ id: PresenterID, at path: ItemPath) {
        var node = root
        node.subtreeCount += 1
        for component in path.components {
            let key = String(component)
            let next: Node
            if let existing = node.children[key] { next = existing } else {
                next = Node(); node.children[key] = next
            }
            next.subtreeCount += 1
            node = next
        }
        node.presenters.append(id)
    }

    mutating func remove(_ id: PresenterID, at path: ItemPath) {
        var trail: [(Node, String)] = []
        var node = root
        for component in path.components {
            let key = String(component)
            guard let next = node.children[key] else { return }
            trail.append((node, key))
            node = next
        }
        guard let index = node.presenters.firstIndex(of: id) else { return }
        node.presenters.remove(at: index)
        root.subtreeCount -= 1
        for (parent, key) in trail {
            let child = parent.children[key]!
            child.subtreeCount -= 1
            if child.subtreeCount == 0 { parent.children[key] = nil }
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
        var node = root
        let string = path.string
        var start = string.utf8.index(after: string.utf8.startIndex)
        while let slash = string.utf8[start...].firstIndex(of: UInt8(ascii: "/")) {
            guard let next = node.children[String(string[start..<slash])], next.subtreeCount > 0 else { break }
            node = next
            if !node.presenters.isEmpty {
                found.append((ItemPath(uncheckedCanonical: String(string[..<slash])), node.presenters))
            }
            start = string.utf8.index(after: slash)
        }
        return found.reversed()
    }

    /// Presenters strictly inside `path`, with their paths.
    func presentersInside(_ path: ItemPath) -> [(ItemPath, PresenterID)] {
        guard let start = node(at: path), start.subtreeCount > start.presenters.count else { return [] }
        var found: [(ItemPath, PresenterID)] = []
        var stack: [(ItemPath, Node)] = start.children.map { (path.appending($0.key), $0.value) }
        while let (childPath, node) = stack.popLast() {
            for id in node.presenters { found.append((childPath, id)) }
            for (name, child) in node.children { stack.append((childPath.appending(name), child)) }
        }
        return found
    }

    private func node(at path: ItemPath) -> Node? {
        if path.isRoot { return root }
        var node = root
        let string = path.string
        var start = string.utf8.index(after: string.utf8.startIndex)
        while true {
            let end = string.utf8[start...].firstIndex(of: UInt8(ascii: "/")) ?? string.utf8.endIndex
            guard let next = node.children[String(string[start..<end])], next.subtreeCount > 0 else { return nil }
            node = next
            if end == string.utf8.endIndex { return node }
            start = string.utf8.index(after: end)
        }
    }
}
