import LinuxSystem
import Coordination

// @unchecked Sendable: the gates are atomics in memory of its own.
/// Quiet gates for names: the gate of a (directory, name) pair is shut while a file known by
/// that name in that directory is held open (or being created, or truncated) under a gated
/// grant, and open otherwise.
///
/// The engine's first quiet gate lets a request held only for its call (an unlink, a mkdir, a
/// chmod) pass while the engine holds nothing; one open file anywhere on the mount shut it for
/// everyone. The files a mount holds open are its own grants, each of one item outside any
/// package, and such a grant conflicts only with a request that locks the same item: one that
/// names it in its directory (unlink, rename from or over it, link or mkdir at its name) or one
/// on the item itself (chmod, setxattr), whose path the engine also spells from its directory
/// and name. So the mount gates these grants (`CoordinationEngine.acquireAtOnce(_:for:gated:)`):
/// each first shuts the gate of the name its path was spelled from, waiting for whoever is
/// passing it, and opens it again after its release. A request held for its call that covers no
/// subtree may then pass beside them while the engine holds nothing else and the gate of every
/// name it locks is open (`MountCoordinator.passQuietly`); one that names its item in a
/// directory passes that way even while nothing is held, so that an open waits only for those
/// passing its own name. rmdir and a directory's rename conflict with whatever is held below
/// them and still need the engine to hold nothing.
///
/// The names share a fixed table of gates by hash: two names on one gate only make a request
/// about one of them coordinate in full while the other is held. A name is the one the grant's
/// path was spelled from when it was taken, and the engine keeps that path for the grant's
/// life, whatever is renamed meanwhile: so does the gate. (A directory's node forgotten by the
/// kernel, which happens only once nothing held is in it any more, comes back with a new id:
/// the name a grant still holds under the old one then no longer leads to its file, and is not
/// guarded.)
final class NameGates: @unchecked Sendable {
    /// A power of two. With n files held open, a request finds a gate shut for another name
    /// about n times in 4096.
    static let count = 4096
    private let gates: UnsafeMutablePointer<QuietGate>

    init() {
        gates = .allocate(capacity: Self.count)
        for index in 0..<Self.count { (gates + index).initialize(to: QuietGate()) }
    }

    deinit {
        gates.deinitialize(count: Self.count)
        gates.deallocate()
    }

    /// The gate of `name` in directory node `directory`.
    func index(of name: String, in directory: NodeID) -> Int {
        // FNV-1a over the name, seeded with the directory's id, then a finalizer so that every
        // bit reaches the index. (Names chosen to collide only cost their requests a full
        // coordination.)
        var hash = 0xcbf2_9ce4_8422_2325 ^ (directory.value &* 0x9E37_79B9_7F4A_7C15)
        for byte in name.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        hash ^= hash >> 33
        hash &*= 0xff51_afd7_ed55_8ccd
        hash ^= hash >> 33
        return Int(truncatingIfNeeded: hash) & (Self.count - 1)
    }

    /// Counts a request in at gate `index` while nothing there is held; false otherwise.
    func enter(_ index: Int) -> Bool { gates[index].enter() }

    func leave(_ index: Int) { gates[index].leave() }

    /// Counts a file held at gate `index`, and returns once nobody who entered before is
    /// still passing it.
    func shut(_ index: Int) {
        gates[index].close()
        gates[index].waitForPassingAccesses()
    }

    /// Counts a file that `shut` counted out, once its grant has ended.
    func open(_ index: Int) { gates[index].open() }
}
