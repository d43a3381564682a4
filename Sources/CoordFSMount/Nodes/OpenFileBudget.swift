import LinuxSystem
import Synchronization

/// How many files and directories each user may keep open through the mount at once. Every
/// open holds one of the daemon's descriptors, and all users' opens draw on its one open-file
/// limit (`DescriptorPool`): without a share each, one user holding some thousands of files open
/// would make every user's opens and creates fail with EMFILE, root's included. A user past its
/// share gets EMFILE alone, as from its own process's limit.
///
/// The mount's owner and root are not held to a user's share: their opens are the daemon's own
/// to give. But they are not given the whole pool either: together they leave `reserve` opens
/// for the other users, and the other users together leave as many for them.
final class OpenFileBudget: Sendable {
    /// Opens each counted user may keep at once.
    let perUser: Int
    /// Opens kept for the other side: the owner and root leave these to everyone else, and
    /// everyone else leaves these to the owner and root.
    let reserve: Int
    private let owner: UInt32
    private let pool: DescriptorPool
    /// Each counted user's opens, and all of theirs.
    private let open = Mutex<(byUser: [UInt32: Int], all: Int)>(([:], 0))
    /// The owner's and root's opens (counted without a lock: they are most of a busy mount's).
    private let privileged = Atomic<Int>(0)

    /// A place in the budget, taken for one open and given back at its release.
    struct Place: Sendable {
        /// The user it counts against; nil for an open of the owner or root.
        let user: UInt32?
    }

    init(perUser: Int, owner: UInt32, pool: DescriptorPool) {
        self.perUser = perUser
        self.owner = owner
        self.pool = pool
        reserve = max(1, min(perUser, pool.openFileRoom / 4))
    }

    func counts(_ user: UInt32) -> Bool { user != 0 && user != owner }

    /// The most open files the owner and root keep together, or all other users together.
    var sideLimit: Int { pool.openFileRoom - reserve }

    /// Whether `user` may open one more now: a first look, before an open waits for its turn.
    func hasRoom(for user: UInt32) -> Bool {
        guard pool.openFiles.load(ordering: .relaxed) < pool.openFileRoom else { return false }
        guard counts(user) else { return privileged.load(ordering: .relaxed) < sideLimit }
        return open.withLock { $0.byUser[user, default: 0] < perUser && $0.all < sideLimit }
    }

    /// A place for one more open of `user`; nil when its share, its side's or the pool's room
    /// is all taken (EMFILE).
    func take(for user: UInt32) -> Place? {
        guard takeFromPool() else { return nil }
        guard counts(user) else {
            if privileged.add(1, ordering: .relaxed).newValue > sideLimit {
                privileged.subtract(1, ordering: .relaxed)
                pool.openFiles.subtract(1, ordering: .relaxed)
                return nil
            }
            return Place(user: nil)
        }
        let taken = open.withLock { open -> Bool in
            let mine = open.byUser[user, default: 0]
            guard mine < perUser, open.all < sideLimit else { return false }
            open.byUser[user] = mine + 1
            open.all += 1
            return true
        }
        if !taken { pool.openFiles.subtract(1, ordering: .relaxed) }
        return taken ? Place(user: user) : nil
    }

    private func takeFromPool() -> Bool {
        if pool.openFiles.add(1, ordering: .relaxed).newValue > pool.openFileRoom {
            pool.openFiles.subtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    func giveBack(_ place: Place) {
        pool.openFiles.subtract(1, ordering: .relaxed)
        guard let user = place.user else {
            privileged.subtract(1, ordering: .relaxed)
            return
        }
        open.withLock { open in
            let left = open.byUser[user, default: 1] - 1
            open.byUser[user] = left > 0 ? left : nil
            open.all -= 1
        }
    }

    /// Every user's opens now, the owner's and root's included.
    var openNow: Int { pool.openFiles.load(ordering: .relaxed) }

    /// The opens each counted user has now (for `coordfs status`).
    var openByUser: [UInt32: Int] { open.withLock { $0.byUser } }
}
