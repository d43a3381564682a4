import CoordFSMount
import CoordinationClient
import LinuxSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads /proc/self/mountinfo, and asks FUSE mounts whether they are coordfs mounts.
enum MountTable {
    typealias Entry = MountInfo.Entry

    static func entries() -> [Entry] { MountInfo.entries() }

    /// Whether `entry` is a FUSE filesystem's mount.
    static func isFuse(_ entry: Entry) -> Bool { entry.type == "fuse" || entry.type.hasPrefix("fuse.") }

    /// The user who made a FUSE mount (its `user_id=`, which the kernel keeps); nil for any other.
    static func owner(of entry: Entry) -> uid_t? {
        guard isFuse(entry), let option = entry.options.first(where: { $0.hasPrefix("user_id=") }) else { return nil }
        return uid_t(option.dropFirst("user_id=".count))
    }

    /// "uid 1000 (alice)", or "root": a user as messages name one.
    static func userName(_ uid: uid_t) -> String {
        if uid == 0 { return "root" }
        guard let entry = getpwuid(uid) else { return "uid \(uid)" }
        return "uid \(uid) (\(String(cString: entry.pointee.pw_name)))"
    }

    /// The FUSE mount holding `path` (absolute) that another user made without `allow_other`:
    /// the kernel lets nobody but that user into it, root included, so nothing there can be
    /// asked or looked at. nil when `path` is on no such mount.
    static func privateMount(holding path: String) -> (entry: Entry, owner: uid_t)? {
        guard let mount = innermostMount(holding: path, in: entries()), let owner = owner(of: mount),
            owner != geteuid(),
            !mount.options.contains("allow_other")
        else { return nil }
        return (mount, owner)
    }

    /// Why another user's private mount cannot be asked: whose it is and what would let one in.
    /// `path` (absolute): a path on it, named `name` as the user gave it; nil for the mount itself.
    static func privateMountReason(
        _ mount: Entry, owner: uid_t, path: String? = nil, named name: String? = nil
    ) -> String {
        let kind = mount.type == "fuse.coordfs" ? "coordfs" : mount.type
        let place: String
        if let path, path != mount.mountPoint {
            place = "'\(name ?? path)' is on the \(kind) mount at '\(mount.mountPoint)', one"
        } else if path != nil {
            place = "'\(name ?? mount.mountPoint)' is a \(kind) mount"
        } else {
            place = "the \(kind) mount at '\(mount.mountPoint)' is one"
        }
        return
            "\(place) that \(userName(owner)) made without -o allow_other: the kernel lets nobody else into it, root included; "
            + "run the command as that user, or have the mount made with -o allow_other"
    }

    /// Throws when `path` (absolute) lies on another user's mount made without `allow_other`
    /// (`privateMount`): that, rather than "not inside a coordfs mount" or "permission denied"
    /// of some item. `name` is the path as the user gave it.
    static func refusePrivate(_ path: String, named name: String? = nil) throws {
        guard let found = privateMount(holding: path) else { return }
        throw CommandFailure(privateMountReason(found.entry, owner: found.owner, path: path, named: name))
    }

    /// Whether `inner` is `outer` or lies inside it (both absolute).
    static func within(_ inner: String, _ outer: String) -> Bool {
        inner == outer || inner.hasPrefix(outer == "/" ? "/" : outer + "/")
    }

    /// The mount `path` (absolute) is on: the innermost, and of several at one point the one on
    /// top (listed last).
    static func innermostMount(holding path: String, in table: [Entry]) -> Entry? {
        let holding = table.filter { within(path, $0.mountPoint) }
        return holding.last { $0.mountPoint.count == holding.map(\.mountPoint.count).max() }
    }

    /// Where `path` (a real path) lies: the device of its filesystem and the path there from
    /// that filesystem's root. A directory bound elsewhere (mount --bind) is one place by
    /// either name.
    static func place(of path: String, in table: [Entry]) -> (device: String, path: String) {
        guard let mount = innermostMount(holding: path, in: table) else { return ("", path) }
        let below = mount.mountPoint == "/" ? path : String(path.dropFirst(mount.mountPoint.count))
        let joined = (mount.root == "/" ? "" : mount.root) + below
        return (mount.device, joined.isEmpty ? "/" : joined)
    }

    /// The coordfs mount whose filesystem `path` is on, as the mount says itself: its mount
    /// point and control socket; nil when no coordfs mount answers for that filesystem. The
    /// socket's server must serve a mount on `path`'s own device: another FUSE filesystem that
    /// passes attributes through (bindfs over a coordfs mount) names a socket whose mount is
    /// elsewhere.
    static func coordfsMount(serving path: String) -> (mountPoint: String, socket: String)? {
        guard let socket = ControlClient.attribute("user.coordfs.socket", of: path),
            let client = try? ControlClient(socketPath: socket)
        else { return nil }
        defer { client.close() }
        guard case .string(let root)? = client.server["root"] else { return nil }
        var here = stat(), there = stat()
        guard stat(path, &here) == 0, stat(root, &there) == 0, here.st_dev == there.st_dev else { return nil }
        return (root, socket)
    }

    /// Whether the mount at `path` is a coordfs mount: it says so, or, where it cannot be asked
    /// (its daemon has gone, or it is another user's), mountinfo gives it coordfs's type.
    static func isCoordfs(_ path: String) -> Bool {
        coordfsMount(serving: path) != nil || type(of: path) == "fuse.coordfs"
    }

    /// The coordfs mounts here, each once, with their backing directories where they can be
    /// learnt. `-o fsname=` and `-o subtype=` change the source and type mountinfo shows, so
    /// each FUSE mount is asked; one that cannot answer counts by coordfs's type, with the
    /// backing its source names (another user's mount renamed so, without allow_other, is not
    /// seen).
    static func coordfsMounts(in table: [Entry]) -> [(mountPoint: String, backing: String?)] {
        var mounts: [(mountPoint: String, backing: String?)] = []
        for entry in table where isFuse(entry) {
            if let served = coordfsMount(serving: entry.mountPoint) {
                // A bind mount of a coordfs mount is that mount.
                if mounts.contains(where: { $0.mountPoint == served.mountPoint }) { continue }
                mounts.append(
                    (served.mountPoint, ControlClient.attribute("user.coordfs.backing", of: served.mountPoint)))
            } else if entry.type == "fuse.coordfs" {
                mounts.append((entry.mountPoint, entry.source.hasPrefix("/") ? entry.source : nil))
            }
        }
        return mounts
    }

    /// Refuses `path` (a real path) where it lies in the backing directory of a live coordfs
    /// mount and no mount serves it: a hold or a watch there would go to the daemon, which
    /// knows nothing of what programs do through the mount (nobody would wait for it, and it
    /// would hear nothing). `name`: the path as the user gave it.
    /// A server chosen by $COORDFS_SOCKET (a daemon serving a shared store's directory, which on
    /// one machine may also be a mount's backing) is the user's to choose.
    static func refuseBacking(_ path: String, named name: String? = nil) throws {
        if ProcessInfo.processInfo.environment["COORDFS_SOCKET"]?.isEmpty == false { return }
        guard ControlClient.mountSocketPath(for: path) == nil else { return }
        for mount in coordfsMounts(in: entries()) {
            guard let backing = mount.backing, within(path, backing) else { continue }
            let inside = path == backing ? "" : String(path.dropFirst(backing == "/" ? 1 : backing.count + 1))
            let through =
                inside.isEmpty ? mount.mountPoint : (mount.mountPoint as NSString).appendingPathComponent(inside)
            throw CommandFailure(
                "'\(name ?? path)' is in the backing directory of the coordfs mount at '\(mount.mountPoint)': "
                    + "programs reach it through the mount, so coordinate through it: '\(through)'")
        }
    }

    /// Refuses a backing directory (real path) that is, holds or lies inside the backing of a
    /// coordfs mount already here, by its path or by its place (through a bind mount): each
    /// mount has its own engine, so two mounts of one tree would not coordinate with each
    /// other, and a program writing through one would not wait for a reader through the other.
    /// A mount `joining` a cluster may share its backing directory with another host's mount of
    /// the same store in the same cluster: those coordinate through it.
    static func refuseOverlap(of backing: String, joining cluster: ClusterSetting? = nil) throws {
        let table = entries()
        let ourPlace = place(of: backing, in: table)
        for mount in coordfsMounts(in: table) {
            guard let named = mount.backing else { continue }
            let theirBacking = URL(fileURLWithPath: named).resolvingSymlinksInPath().path
            let theirPlace = place(of: theirBacking, in: table)
            // By path: one inside the other, across any mounts between; by place: through a bind mount.
            let oneFilesystem = ourPlace.device == theirPlace.device
            let same = backing == theirBacking || oneFilesystem && ourPlace.path == theirPlace.path
            let inside = within(backing, theirBacking) || oneFilesystem && within(ourPlace.path, theirPlace.path)
            guard inside || within(theirBacking, backing) || oneFilesystem && within(theirPlace.path, ourPlace.path)
            else { continue }
            try refuseAbandoned(mount.mountPoint)
            if let cluster, same, let theirs = clusterOf(mount.mountPoint),
                theirs.store == cluster.store, !Set(theirs.endpoints).isDisjoint(with: cluster.endpoints)
            {
                // Two hosts of one name would take each other's news and presences.
                if theirs.host == cluster.host {
                    throw CommandFailure(
                        "the coordfs mount at '\(mount.mountPoint)' is already the host '\(cluster.host)' of the store "
                            + "'\(cluster.store)': give this one another --host-name")
                }
                continue
            }
            if let cluster {
                throw CommandFailure(
                    "'\(backing)' overlaps the backing '\(theirBacking)' of the coordfs mount at '\(mount.mountPoint)', "
                        + "which is not a host of the store '\(cluster.store)' on this cluster with the same backing directory: the two would "
                        + "not coordinate with each other; give it the same --cluster and --cluster-store, or --allow-overlap to mount it anyway"
                )
            }
            let relation =
                backing == theirBacking
                ? "is already the backing"
                : same
                    ? "is '\(theirBacking)', the backing"
                    : inside ? "lies inside '\(theirBacking)', the backing" : "holds '\(theirBacking)', the backing"
            throw CommandFailure(
                "'\(backing)' \(relation) of the coordfs mount at '\(mount.mountPoint)': two mounts of one "
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
    static func abandonedMount(holding path: String) -> Entry? {
        guard let mount = innermostMount(holding: path, in: entries()), isFuse(mount) else { return nil }
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
        let place =
            path == mount.mountPoint
            ? "'\(name ?? path)' is a \(kind) mount whose daemon has gone"
            : "'\(name ?? path)' is on the \(kind) mount at '\(mount.mountPoint)', whose daemon has gone"
        let clear = isCoordfs ? "coordfs unmount \(mount.mountPoint)" : "fusermount3 -u \(mount.mountPoint)"
        throw CommandFailure("\(place) (transport endpoint is not connected): `\(clear)` clears it")
    }
}
