import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads /proc/self/mountinfo.
enum MountTable {
    static func entries() -> [(mountPoint: String, type: String)] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 1, fields.count > 4 else { return nil }
            return (unescape(String(fields[4])), String(fields[dash + 1]))
        }
    }

    static func type(of path: String) -> String? { entries().last { $0.mountPoint == path }?.type }
    static func isMountPoint(_ path: String) -> Bool {
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        return type(of: resolved) != nil
    }

    /// The FUSE mount that holds `path` (absolute) when its server has gone: the kernel then
    /// answers every call on it with ENOTCONN, which reads as "does not exist" or "not a coordfs
    /// mount" to a command that only asks whether a path is there. nil when `path` is on no such
    /// mount. statvfs, not stat: a stat may still be answered from the kernel's cache.
    static func abandonedMount(holding path: String) -> (mountPoint: String, type: String)? {
        let holding = entries().filter { entry in
            path == entry.mountPoint || path.hasPrefix(entry.mountPoint == "/" ? "/" : entry.mountPoint + "/")
        }
        // The innermost mount, and of several at one point the one on top (listed last).
        guard let mount = holding.last(where: { $0.mountPoint.count == holding.map(\.mountPoint.count).max() }),
              mount.type == "fuse" || mount.type.hasPrefix("fuse.") else { return nil }
        var info = statvfs()
        return statvfs(mount.mountPoint, &info) != 0 && (errno == ENOTCONN || errno == ECONNABORTED) ? mount : nil
    }

    /// Throws when `path` (absolute) lies on an abandoned FUSE mount: what happened, and the
    /// command that clears it. `name` is the path as the user gave it.
    static func refuseAbandoned(_ path: String, named name: String? = nil) throws {
        guard let mount = abandonedMount(holding: path) else { return }
        let isCoordfs = mount.type == "fuse.coordfs"
        let kind = isCoordfs ? "coordfs" : mount.type
        let place = path == mount.mountPoint ? "'\(name ?? path)' is a \(kind) mount whose daemon has gone"
            : "'\(name ?? path)' is on the \(kind) mount at '\(mount.mountPoint)', whose daemon has gone"
        let clear = isCoordfs ? "coordfs unmount \(mount.mountPoint)" : "fusermount3 -u \(mount.mountPoint)"
        throw CommandFailure("\(place) (transport endpoint is not connected): `\(clear)` clears it")
    }

    /// mountinfo escapes space, tab, newline and backslash as octal.
    private static func unescape(_ text: String) -> String {
        var iterator = Array(text.utf8)[...]
        var bytes: [UInt8] = []
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "\\"), iterator.count >= 3, let value = UInt8(String(decoding: iterator.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                iterator = iterator.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
