@testable import Coordination
import Testing

@Suite struct ItemPathTests {
    @Test func normalisesSpelling() {
        #expect(ItemPath("/a//b/./c/../d/")?.string == "/a/b/d")
        #expect(ItemPath("/..")?.string == "/")
        #expect(ItemPath("/")?.isRoot == true)
        #expect(ItemPath("relative") == nil)
        #expect(ItemPath("") == nil)
        #expect(ItemPath("/a/.hidden/..x")?.string == "/a/.hidden/..x")
    }

    @Test func ancestryIsByComponent() {
        let ab = ItemPath("/a/b")!
        #expect(ab.isAncestor(of: ItemPath("/a/b/c")!))
        #expect(!ab.isAncestor(of: ItemPath("/a/bc")!))
        #expect(!ab.isAncestor(of: ab))
        #expect(ItemPath.root.isAncestor(of: ab))
        #expect(ab.ancestors.map(\.string) == ["/a", "/"])
        #expect(ab.parent?.string == "/a" && ItemPath("/a")!.parent == .root)
    }

    @Test func relocation() {
        let from = ItemPath("/x/dir")!, to = ItemPath("/y/moved")!
        #expect(ItemPath("/x/dir/a/b")!.relocated(from: from, to: to)?.string == "/y/moved/a/b")
        #expect(from.relocated(from: from, to: to) == to)
        #expect(ItemPath("/x/directory")!.relocated(from: from, to: to) == nil)
    }
}
