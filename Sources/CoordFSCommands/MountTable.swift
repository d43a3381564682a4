import CoordFSMount
import CoordinationClient
import LinuxSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads /proc/self/mountinfo.
enum MountTable {
    /// Each mount: where, its type, and its source (a coordfs mount's is its backing directory).
    static func entries() -> [(mountPoint: String, type: String, source: String)] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 2, fields.count > 4 else { return nil }
            return (unescape(String(fields[4])), String(fields[dash + 1]), unescape(String(fields[dash + 2])))
        }
    }

    /// Refuses a backing directory (real path) that is, holds or lies inside the backing of a
    /// coordfs mount already here: each mount has its own engine, so two mounts of one tree
    /// would not coordinate with each other, and a program writing through one would not wait
    /// for a reader through the other. (Mounts made before coordfs named its backing as the
    /// mount's source say "coordfs" there and are not seen.) A mount `joining` a cluster may
    /// share its backing directory with another host's mount of the same store in the same
    /// cluster: those coordinate through it.
    static func refuseOverlap(of backing: String, joining cluster: ClusterSetting? = nil) throws {
        func within(_ inner: String, _ outer: String) -> Bool { inner == outer || inner.hasPrefix(outer == "/" ? "/" : outer + "/") }
        for mount in entries() where mount.type == "fuse.coordfs" && mount.source.hasPrefix("/") {
            guard within(backing, mount.source) || within(mount.source, backing) else { continue }
            try refuseAbandoned(mount.mountPoint)
            if let cluster, backing == mount.source, let theirs = clusterOf(mount.mountPoint),
               theirs.store == cluster.store, !Set(theirs.endpoints).isDisjoint(with: cluster.endpoints) {
                // Two hosts of one name would take each other's news and presences.
                if theirs.host == cluster.host {
                    throw CommandFailure("the coordfs mount at '\(mount.mountPoint)' is already the host '\(cluster.host)' of the store "
                        + "'\(cluster.store)': give this one another --host-name")
                }
                continue
            }
            if let cluster {
                throw CommandFailure("'\(backing)' overlaps the backing '\(mount.source)' of the coordfs mount at '\(mount.mountPoint)', "
                    + "which is not a host of the store '\(cluster.store)' on this cluster with the same backing directory: the two would "
                    + "not coordinate with each other; give it the same --cluster and --cluster-store, or --allow-overlap to mount it anyway")
            }
            let relation = backing == mount.source ? "is already the backing"
                : within(backing, mount.source) ? "lies inside '\(mount.source)', the backing" : "holds '\(mount.source)', the backing"
            throw CommandFailure("'\(backing)' \(relation) of the coordfs mount at '\(mount.mountPoint)': two mounts of one "
                + "tree do not coordinate with each other; use that mount, or --allow-overlap to mount it anyway")
        }
    }

    /// The etcd endpoints, host name and store of the cluster a coordfs mount's host belongs to
    /// (its root's `user.coordfs.cluster`, a line each); nil without one, or when this user may
    /// not read it.
    static func clusterOf(_ mountPoint: String) -> (endpoints: [String], host: String, store: String)? {
        guard let value = ControlClient.attribute("user.coordfs.cluster", of: mountPoint) else { return nil }
        let lines = value.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count == 3 else { return nil }
        return (lines[0].split(separator: ",").map(String.init), String(lines[1]), String(lines[2]))
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
    static func abandonedMount(holding path: String) -> (mountPoint: String, type: String, source: String)? {
        let holding = entries().filter { entry in
            path == entry.mountPoint || path.hasPrefix(entry.mountPoint == "/" ? "/" : entry.mountPoint + "/")
        }
        // The innermost mount, and of several at one point the one on top (listed last).
        guard let mount = holding.last(where: { $0.mountPoint.count == holding.map(\.mountPoint.count).max() }),
              mount.type == "fuse" || mount.type.hasPrefix("fuse.") else { return nil }
        var info = statvfs()
        do throws(Errno) { _ = try check(statvfs(mount.mountPoint, &info)) } catch {
            return error == .socketNotConnected || error == .connectionAbort ? mount : nil
        }
        return nil
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
