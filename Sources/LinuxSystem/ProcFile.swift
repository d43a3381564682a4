import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads small /proc files, which report a size of zero.
///
/// As bytes: /proc/PID/status is some sixty lines, splitting it as a `String` walks it grapheme
/// by grapheme, and the first coordinated call of every new process (each `cat` a build runs,
/// say) reads it.
package enum ProcFile {
    package static func read(_ path: String) -> String? {
        readBytes(path).map { String(decoding: $0, as: UTF8.self) }
    }

    package static func readBytes(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = Glibc.read(fd, &chunk, chunk.count)
            if count <= 0 { break }
            data += chunk[0..<count]
        }
        return data
    }

    /// Fields of /proc/PID/status ("Tgid", "PPid", "Groups"): each value without its name and
    /// the blanks after it. Nil when the process is gone; a field the kernel does not write is
    /// left out.
    package static func statusFields(_ names: Set<String>, of pid: Int32) -> [String: String]? {
        guard let text = readBytes("/proc/\(pid)/status") else { return nil }
        var found: [String: String] = [:]
        var lineStart = text.startIndex
        while lineStart < text.endIndex && found.count < names.count {
            let lineEnd = text[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? text.endIndex
            if let colon = text[lineStart..<lineEnd].firstIndex(of: UInt8(ascii: ":")) {
                // Names are short ASCII: a small String, made without allocating.
                let name = String(decoding: text[lineStart..<colon], as: UTF8.self)
                if names.contains(name) {
                    var valueStart = colon + 1
                    while valueStart < lineEnd
                        && (text[valueStart] == UInt8(ascii: " ") || text[valueStart] == UInt8(ascii: "\t"))
                    {
                        valueStart += 1
                    }
                    found[name] = String(decoding: text[valueStart..<lineEnd], as: UTF8.self)
                }
            }
            lineStart = lineEnd + 1
        }
        return found
    }

    /// Who a thread works for: its process, whether it is one of the kernel's own threads
    /// (writeback flushers, nfsd), and the process's parent. One read of /proc/TID/status.
    package struct Caller: Sendable, Equatable {
        package let process: Int32
        package let isKernelThread: Bool
        /// 0 when unknown (and for the first process).
        package let parent: Int32

        package init(process: Int32, isKernelThread: Bool, parent: Int32 = 0) {
            self.process = process
            self.isKernelThread = isKernelThread
            self.parent = parent
        }
    }

    package static func caller(of tid: Int32) -> Caller? {
        guard let fields = statusFields(["Tgid", "PPid", "Kthread"], of: tid),
            let group = fields["Tgid"].flatMap({ Int32($0) })
        else { return nil }
        // "Kthread" exists since Linux 6.x; before it, kernel threads are kthreadd (2) and its children.
        let isKernelThread = fields["Kthread"].map { $0 == "1" } ?? (group == 2 || fields["PPid"] == "2")
        return Caller(process: group, isKernelThread: isKernelThread, parent: fields["PPid"].flatMap { Int32($0) } ?? 0)
    }

    /// Whether process `pid` has ended: gone, or a zombie nobody has reaped yet (a daemon's
    /// parent is often init, and in a container that may not reap at all).
    package static func hasEnded(_ pid: Int32) -> Bool {
        guard let state = statusFields(["State"], of: pid)?["State"] else { return true }
        return state.hasPrefix("Z") || state.hasPrefix("X")
    }

    /// A process's command name.
    package static func command(of pid: Int32) -> String? {
        read("/proc/\(pid)/comm")?.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
