import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `-o uid=N,gid=N,umask=M`, as sshfs and bindfs users know them: the owner, group and
/// permissions the mount shows for every item, whatever the backing directory holds. The
/// backing files keep theirs; what changes is what stat, ls and the kernel's permission checks
/// (with `allow_other`, `default_permissions`) see. The daemon still acts with its own rights.
public struct OwnershipView: Sendable, Equatable {
    public var owner: uid_t?
    public var group: gid_t?
    /// Permission bits taken away from every item's mode (octal, as umask(2)).
    public var umask: mode_t?

    public init(owner: uid_t? = nil, group: gid_t? = nil, umask: mode_t? = nil) {
        self.owner = owner
        self.group = group
        self.umask = umask
    }

    public var isEmpty: Bool { owner == nil && group == nil && umask == nil }

    /// The options of a `-o` list this view takes, and why one is wrong; the others are left.
    /// `uid=` and `gid=` take a number or a name.
    public static func take(from options: inout [String]) throws(OwnershipViewError) -> OwnershipView {
        var view = OwnershipView()
        var kept: [String] = []
        for option in options {
            let parts = option.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2, ["uid", "gid", "umask"].contains(parts[0]) else { kept.append(option); continue }
            let value = parts[1]
            switch parts[0] {
            case "uid":
                if let number = uid_t(value) {
                    view.owner = number
                } else if let entry = getpwnam(value) {
                    view.owner = entry.pointee.pw_uid
                } else {
                    throw OwnershipViewError("uid=\(value): no such user")
                }
            case "gid":
                if let number = gid_t(value) {
                    view.group = number
                } else if let entry = getgrnam(value) {
                    view.group = entry.pointee.gr_gid
                } else {
                    throw OwnershipViewError("gid=\(value): no such group")
                }
            default:
                guard let bits = mode_t(value, radix: 8), bits <= 0o7777 else {
                    throw OwnershipViewError("umask=\(value): not an octal mask from 0 to 7777")
                }
                view.umask = bits
            }
        }
        options = kept
        return view
    }

    /// `info` as the mount shows it.
    @inline(__always)
    func shown(_ info: stat) -> stat {
        if isEmpty { return info }
        var info = info
        if let owner { info.st_uid = owner }
        if let group { info.st_gid = group }
        if let umask { info.st_mode &= ~umask }
        return info
    }
}

public struct OwnershipViewError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The view in force: set at mount, changed by a remount (`Filesystem.remount`).
final class OwnershipSetting: Sendable {
    /// Whether the view changes anything: nearly never, and then attributes pass untouched.
    private let active: Atomic<Bool>
    private let view: Mutex<OwnershipView>

    init(_ view: OwnershipView) {
        active = Atomic(!view.isEmpty)
        self.view = Mutex(view)
    }

    var current: OwnershipView { view.withLock { $0 } }

    func set(_ new: OwnershipView) {
        view.withLock { $0 = new }
        active.store(!new.isEmpty, ordering: .releasing)
    }

    @inline(__always)
    func shown(_ info: stat) -> stat {
        guard active.load(ordering: .acquiring) else { return info }
        return view.withLock { $0.shown(info) }
    }
}
