import Foundation

/// The mounts this process sees (/proc/self/mountinfo).
package enum MountInfo {
    /// A mount: where, its type, its source (a coordfs mount's is its backing directory, unless
    /// `-o fsname=` says otherwise), its filesystem's device ("major:minor"), the directory of
    /// that filesystem it shows (not "/" for a bind mount of a directory), and its
    /// filesystem's own options (a FUSE mount's `user_id=` and `allow_other`).
    package typealias Entry = (
        mountPoint: String, type: String, source: String, device: String, root: String, options: [String]
    )

    package static func entries() -> [Entry] {
        guard let text = ProcFile.read("/proc/self/mountinfo") else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 2, fields.count > 4 else { return nil }
            let options = fields.count > dash + 3 ? fields[dash + 3].split(separator: ",").map(String.init) : []
            return (
                unescape(String(fields[4])), String(fields[dash + 1]), unescape(String(fields[dash + 2])),
                String(fields[2]), unescape(String(fields[3])), options
            )
        }
    }

    /// A device number as mountinfo writes it ("major:minor").
    package static func deviceName(_ device: UInt64) -> String {
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
        let minor = (device & 0xff) | ((device >> 12) & ~0xff)
        return "\(major):\(minor)"
    }

    /// Whether the directory at `path` (absolute, as /proc names it) is the root of its
    /// filesystem (on `device`) and not a directory below it: some mount shows that
    /// filesystem's root there.
    package static func isFilesystemRoot(_ path: String, device: UInt64) -> Bool {
        let name = deviceName(device)
        return entries().contains { $0.device == name && $0.root == "/" && $0.mountPoint == path }
    }

    /// mountinfo escapes space, tab, newline and backslash as octal.
    private static func unescape(_ text: String) -> String {
        var iterator = Array(text.utf8)[...]
        var bytes: [UInt8] = []
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "\\"), iterator.count >= 3,
                let value = UInt8(String(decoding: iterator.prefix(3), as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                iterator = iterator.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
