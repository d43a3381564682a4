@testable import Coordination
import TestSupport
import Testing

/// The presenter index against a plain list of (path, presenter): the same answers for every
/// query, through random registrations and removals.
@Suite struct PresenterTreeTests {
    /// Paths over a small alphabet, so that they share ancestors often; some long enough that
    /// their spelling is not a small string.
    static func randomPath(_ random: inout SeededGenerator) -> ItemPath {
        let names = ["a", "b", "docs", "a-rather-long-directory-name", "é", "e\u{301}"]
        let depth = Int.random(in: 0...4, using: &random)
        if depth == 0 { return .root }
        return ItemPath("/" + (0..<depth).map { _ in names.randomElement(using: &random)! }.joined(separator: "/"))!
    }

    @Test func answersAsAPlainListDoes() {
        var random = SeededGenerator(seed: 7)
        var tree = PresenterTree()
        var model: [(ItemPath, PresenterID)] = []
        var probes: [ItemPath] = (0..<40).map { _ in Self.randomPath(&random) }
        probes.append(ItemPath("/not/registered/anywhere")!)
        for step in 0..<600 {
            if model.isEmpty || Bool.random(using: &random) {
                let entry = (Self.randomPath(&random), PresenterID(rawValue: UInt64(step)))
                tree.insert(entry.1, at: entry.0)
                model.append(entry)
            } else {
                let (path, id) = model.remove(at: Int.random(in: 0..<model.count, using: &random))
                tree.remove(id, at: path)
            }
            for probe in probes {
                let at = model.filter { $0.0 == probe }.map(\.1)
                #expect(tree.presenters(at: probe) == at, "presenters at \(probe), step \(step)")
                let above = Dictionary(grouping: model.filter { $0.0.isAncestor(of: probe) }, by: \.0)
                    .mapValues { $0.map(\.1) }
                let found = tree.presentersAbove(probe)
                #expect(found.map(\.0) == above.keys.sorted().reversed(), "ancestors of \(probe), step \(step)")
                #expect(found.allSatisfy { above[$0.0] == $0.1 })
                let inside = model.filter { probe.isAncestor(of: $0.0) }
                #expect(
                    Set(tree.presentersInside(probe).map { "\($0.0) \($0.1)" }) == Set(inside.map { "\($0.0) \($0.1)" })
                )
            }
            #expect(tree.isEmpty == model.isEmpty)
        }
    }

    @Test func emptiedBranchesAreDropped() {
        var tree = PresenterTree()
        let deep = ItemPath("/a/b/c/d")!, shallow = ItemPath("/a")!
        tree.insert(PresenterID(rawValue: 1), at: deep)
        tree.insert(PresenterID(rawValue: 2), at: shallow)
        tree.remove(PresenterID(rawValue: 1), at: deep)
        // /a/b and below hold nobody now: a walk from /a/b/c/d/e finds /a and nothing below it.
        #expect(tree.presentersAbove(ItemPath("/a/b/c/d/e")!).map(\.0) == [shallow])
        #expect(tree.presentersInside(shallow).isEmpty)
        tree.remove(PresenterID(rawValue: 2), at: shallow)
        #expect(tree.isEmpty)
        // A branch made again after being dropped works like a new one.
        tree.insert(PresenterID(rawValue: 3), at: deep)
        #expect(tree.presentersInside(shallow).map(\.1) == [PresenterID(rawValue: 3)])
        // Removing what is not there changes nothing.
        tree.remove(PresenterID(rawValue: 9), at: deep)
        tree.remove(PresenterID(rawValue: 3), at: ItemPath("/elsewhere")!)
        #expect(tree.presenters(at: deep) == [PresenterID(rawValue: 3)])
    }
}
