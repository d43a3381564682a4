import Coordination
import CoordinationRuntime
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Linux names are bytes. A name that is not UTF-8 (a Latin-1 "café" is caf\xe9) reaches the
/// backing directory, the kernel and `coordfs watch` byte for byte: it used to be written to
/// the backing directory with U+FFFD in place of its byte.
@Suite(.serialized) struct NameBytesTests {
    static let latin1: [UInt8] = Array("caf".utf8) + [0xE9]
    static let other: [UInt8] = [0x62, 0xFF]
    static let renamed: [UInt8] = [0x63, 0xFE]
    /// U+F7E9 as UTF-8: a name of its own, not the byte 0xE9.
    static let privateUse: [UInt8] = Array("caf\u{F7E9}".utf8)

    /// `directory`/`name` as the NUL-terminated bytes a system call takes.
    static func path(_ directory: String, _ name: [UInt8]) -> [CChar] {
        (Array(directory.utf8) + [UInt8(ascii: "/")] + name + [0]).map { CChar(bitPattern: $0) }
    }

    /// The names in `directory`, as bytes.
    /// The names in `directory`, as bytes; the version store the mount keeps in its backing
    /// directory (docs/versions.md) left out.
    static func names(_ directory: String) -> Set<[UInt8]> {
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        var names = Set<[UInt8]>()
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] && name != Array(".coordfs-versions".utf8) { names.insert(name) }
        }
        return names
    }

    static func create(_ path: [CChar], _ contents: String) -> Bool {
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return write(fd, contents, contents.utf8.count) == contents.utf8.count
    }

    @Test func aNameThatIsNotUTF8KeepsItsBytesOnDisk() throws {
        let fx = try MountFixture()
        let mount = fx.mountPoint.path, backing = fx.backingPath("")
        #expect(Self.create(Self.path(mount, Self.latin1), "x"))
        #expect(Self.create(Self.path(mount, Self.privateUse), "y"))
        #expect(Self.names(backing) == [Self.latin1, Self.privateUse])
        #expect(Self.names(mount) == [Self.latin1, Self.privateUse])
        // One made in the backing directory is found, read, renamed and removed through the mount.
        #expect(Self.create(Self.path(backing, Self.other), "z"))
        var info = stat()
        #expect(stat(Self.path(mount, Self.other), &info) == 0 && info.st_size == 1)
        #expect(rename(Self.path(mount, Self.other), Self.path(mount, Self.renamed)) == 0)
        #expect(Self.names(backing) == [Self.latin1, Self.privateUse, Self.renamed])
        #expect(unlink(Self.path(mount, Self.renamed)) == 0 && unlink(Self.path(mount, Self.privateUse)) == 0)
        #expect(Self.names(backing) == [Self.latin1])
        // A symbolic link's target is bytes too, both ways.
        let target = Self.latin1.map { CChar(bitPattern: $0) } + [0]
        #expect(symlink(target, Self.path(mount, Array("link".utf8))) == 0)
        for directory in [backing, mount] {
            var buffer = [CChar](repeating: 0, count: 64)
            let count = readlink(Self.path(directory, Array("link".utf8)), &buffer, buffer.count)
            #expect(
                count == Self.latin1.count && buffer.prefix(count).map { UInt8(bitPattern: $0) } == Self.latin1,
                "\(directory)")
        }
    }

    @Test func watchPrintsTheBytesAndJSONTheirEscapes() throws {
        let fx = try MountFixture()
        let mount = fx.mountPoint.path
        let text = fx.base.appendingPathComponent("text.out").path,
            json = fx.base.appendingPathComponent("json.out").path
        // Both watches start, then the name is made, then both end one quiet second later.
        let script = """
            "$1" watch -q -t 1 --format '%w%f %e' "$2" > "$3" & "$1" watch -q -t 1 --json "$2" > "$4" &
            for _ in $(seq 100); do
                [ "$("$1" status -n -o TYPE "$2" | grep -c PRESENT)" = 2 ] && break
                sleep 0.05
            done
            python3 -c 'import sys; open(sys.argv[1].encode() + b"/caf\\xe9", "w").write("x")' "$2"
            wait
            """
        let result = try run("/bin/sh", ["-c", script, "sh", Paths.binary.path, mount, text, json])
        #expect(result.status == 0, "\(result)")
        let printed = try Data(contentsOf: URL(fileURLWithPath: text))
        #expect(
            Array(printed).starts(with: Array("\(mount)/".utf8) + Self.latin1 + Array(" SUBITEM_APPEARED".utf8)),
            "\(String(decoding: printed, as: UTF8.self))")
        let line = try String(contentsOfFile: json, encoding: .utf8)
        #expect(line.contains(#""name":"caf\udce9""#), "\(line)")
    }
}
