import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A LOOKUP of a name whose item the mount knows (the kernel's entry timed out) is answered
/// from the known node after one fstatat (`InodeTable.knownChild`); an item replaced behind
/// the mount's back is still seen as the new item.
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
        let before = try fx.statistics()["known_lookups"] ?? 0
        let second = try Self.inodeNumbers(fx, names)
        let after = try fx.statistics()["known_lookups"] ?? 0
        #expect(first.count == 20 && second == first)
        #expect(after - before >= 20, "every second lookup answered from the known node: \(before) -> \(after)")
    }

    @Test func anItemReplacedBehindTheMountIsTheNewItem() throws {
        let fx = try MountFixture(["--cache-timeout", "0"])
        let backingFile = fx.backing.appendingPathComponent("doc")
        try Data("old".utf8).write(to: backingFile)
        let old = try Self.inodeNumbers(fx, ["doc"])
        // Replaced in the backing directory: the mount's descriptor keeps the old inode alive,
        // so the new file has another number, and the mount must show it.
        try FileManager.default.removeItem(at: backingFile)
        try Data("new!".utf8).write(to: backingFile)
        let new = try Self.inodeNumbers(fx, ["doc"])
        #expect(old.count == 1 && new.count == 1 && old != new)
        let content = try String(contentsOf: fx.mountPoint.appendingPathComponent("doc"), encoding: .utf8)
        #expect(content == "new!")
        // A name gone behind the mount is gone through it too.
        try FileManager.default.removeItem(at: backingFile)
        #expect(!FileManager.default.fileExists(atPath: fx.mountPoint.appendingPathComponent("doc").path))
    }
}
