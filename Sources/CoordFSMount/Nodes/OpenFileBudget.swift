import LinuxSystem
import Synchronization

/// How many files and directories each user may keep open through the mount at once. Every
/// open holds one of the daemon's descriptors, and all users' opens draw on its one open-file
/// limit: without a share each, one user holding some thousands of files open would make every
/// user's opens and creates fail with EMFILE, root's included. A user past its share gets
/// EMFILE alone, as from its own process's limit.
///
/// The mount's owner and root are not counted: their opens are the daemon's own to give.
final class OpenFileBudget: Sendable {
    /// Opens each counted user may keep at once.
    let perUser: Int
    private let owner: UInt32
    private let open = Mutex<[UInt32: Int]>([:])

    /// A place in the budget, taken for one open and given back at its release.
    struct Place: Sendable {
        /// The user it counts against; nil for an open that is not counted.
        let user: UInt32?
    }

    init(perUser: Int, owner: UInt32) {
        self.perUser = perUser
        self.owner = owner
    }

    func counts(_ user: UInt32) -> Bool { user != 0 && user != owner }

    /// Whether `user` may open one more now: a first look, before an open waits for its turn.
    func hasRoom(for user: UInt32) -> Bool {
        guard counts(user) else { return true }
        return open.withLock { $0[user, default: 0] } < perUser
    }

    /// A place for one more open of `user`; nil when its share is all taken (EMFILE).
    func take(for user: UInt32) -> Place? {
        guard counts(user) else { return Place(user: nil) }
        return open.withLock { open -> Place? in
            let mine = open[user, default: 0]
            guard mine < perUser else { return nil }
            open[user] = mine + 1
            return Place(user: user)
        }
    }

    func giveBack(_ place: Place) {
        guard let user = place.user else { return }
        open.withLock { open in
            let left = open[user, default: 1] - 1
            open[user] = left > 0 ? left : nil
        }
    }

    /// The opens each counted user has now (for `coordfs status`).
    var openByUser: [UInt32: Int] { open.withLock { $0 } }
}
