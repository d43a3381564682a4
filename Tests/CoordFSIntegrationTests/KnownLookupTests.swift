import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A LOOKUP of a name whose item the mount knows (the kernel's entry timed out) is answered
/// from the known node without opening the item: after one fstatat where the node holds a
/// descriptor (`InodeTable.knownChild`), else by its attributes and handle (a file the mount
/// never opened, `InodeTable.rememberUnopened`). An item replaced behind the mount's back is
/// still seen as the new item. Where the last lookup in a directory found an item not known
/// (a first walk), the next one skips the fstatat.
@Suite(.serialized) struct KnownLookups {
    /// stat of each name, then its inode number, through the mount.
    static func inodeNumbers(_ fx: MountFixture, _ names: [String]) throws -> [UInt64] {
        let script = "import os, sys\nfor n in sys.argv[2:]: print(os.stat(os.path.join(sys.argv[1], n)).st_ino)"
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path] + names)
        #expect(result.status == 0, "\(result.errors)")
        return result.output.split(separator: "\n").compactMap { UInt64($0) }
    }

    @Test func aKnownItemIsFoundAgainWithoutOpeningIt() throws {
        // Entries time out at once: every stat is a LOOKUP.
        let fx = try MountFixture(["--cache-timeout", "0"])
        let names = (0..<20).map { "f\($0)" }
        for name in names { try Data(name.utf8).write(to: fx.backing.appendingPathComponent(name)) }
        let first = try Self.inodeNumbers(fx, names)
        let before = try fx.statistics()
        let second = try Self.inodeNumbers(fx, names)
        let after = try fx.statistics()
        #expect(first.count == 20 && second == first)
        // Files the mount never opened: each found by its handle (or, where one of the first
        // lookups opened its item, after an fstatat), none opened again.
        let found = (after["known_lookups"] ?? 0) - (before["known_lookups"] ?? 0)
        #expect(found >= 19, "second lookups answered from the known node: \(found)")
        #expect(after["known_lookup_misses"] == before["known_lookup_misses"])
    }

    @Test func aFirstWalkSpendsNoCallLookingForKnownItems() throws {
        let fx = try MountFixture(["--cache-timeout", "0"])
        let names = (0..<20).map { "f\($0)" }
        for name in names { try Data(name.utf8).write(to: fx.backing.appendingPathComponent(name)) }
        #expect(try Self.inodeNumbers(fx, names).count == 20)
        let statistics = try fx.statistics()
        // No item was known: an fstatat before each open would have found nothing (the first
        // lookup in the mount's root is the only one that may try).
        #expect((statistics["known_lookup_misses"] ?? -1) <= 1, "\(statistics)")
        #expect(statistics["known_lookups"] == 0, "\(statistics)")
    }

    @Test func itemsMadeThroughTheMountAreFoundKnownAtOnce() throws {
        let fx = try MountFixture(["--cache-timeout", "0"])
        let names = (0..<20).map { "f\($0)" }
        for name in names { try Data(name.utf8).write(to: fx.mountPoint.appendingPathComponent(name)) }
        let before = try fx.statistics()["known_lookups"] ?? 0
        #expect(try Self.inodeNumbers(fx, names).count == 20)
        let after = try fx.statistics()["known_lookups"] ?? 0
        #expect(
            after - before >= 20,
            "every lookup of an item made through the mount answered from its node: \(before) -> \(after)")
    }

    @Test func anItemReplacedBehindTheMountIsTheNewItem() throws {
        let fx = try MountFixture(["--cache-timeout", "0"])
        let backingFile = fx.backing.appendingPathComponent("doc")
        try Data("old".utf8).write(to: backingFile)
        let old = try Self.inodeNumbers(fx, ["doc"])
        // Replaced in the backing directory, perhaps by a file with the old one's inode number
        // (a file only stat'ed is not held open by the mount): the mount must show the new one.
        try FileManager.default.removeItem(at: backingFile)
        try Data("new!".utf8).write(to: backingFile)
        let new = try Self.inodeNumbers(fx, ["doc"])
        var backingInfo = stat()
        try #require(stat(backingFile.path, &backingInfo) == 0)
        #expect(old.count == 1 && new == [UInt64(backingInfo.st_ino)])
        let content = try String(contentsOf: fx.mountPoint.appendingPathComponent("doc"), encoding: .utf8)
        #expect(content == "new!")
        // A name gone behind the mount is gone through it too.
        try FileManager.default.removeItem(at: backingFile)
        #expect(!FileManager.default.fileExists(atPath: fx.mountPoint.appendingPathComponent("doc").path))
    }
}
