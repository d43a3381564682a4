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

    @Test func sameBytesSameItemOtherBytesAnotherItem() {
        // "é" precomposed and decomposed: equal as Swift strings, two names on Linux (C26 is lexical).
        let composed = ItemPath("/d/caf\u{E9}")!, decomposed = ItemPath("/d/cafe\u{301}")!
        #expect(composed.string == decomposed.string)
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed, ItemPath("/d/caf\u{E9}")!]).count == 2)
        #expect((composed < decomposed) != (decomposed < composed))
        // Paths of every length up to past two 8-byte words, equal and differing in the last byte.
        for length in 1...20 {
            let name = String(repeating: "n", count: length)
            let built = ItemPath.root.appending("d").appending(name)
            #expect(built == ItemPath("/d/" + name)!)
            #expect(built.hashValue == ItemPath("/d/" + name)!.hashValue)
            #expect(built != ItemPath("/d/" + name.dropLast() + "m")!)
            #expect(ItemPath("/d")!.appending("a/" + name) == ItemPath("/d/a/" + name)!)
        }
    }
}
