import Coordination
import Synchronization

/// The holds that processes took through a control socket and are inside of now, by process.
///
/// A Swift program coordinating on an item of a mount holds it through the mount's socket and
/// then, in its accessor, opens, writes and renames the item through the mount. Those requests
/// are the accessor's own work (C20, docs/swift.md): they take no intent of their own and
/// message nobody again; the hold did that once, and tells presenters what changed when it ends.
package final class AccessorHolds: Sendable {
    /// One granted hold of a process.
    package struct Entry: Sendable {
        package let token: UInt64
        package let claim: Claim
        package let intents: [Intent]
        /// On a host of a shared store, the hold's stamp against its host's losses of cover
        /// (`ClaimGate.coverStamp`): its accessor's requests after a loss that reaches their
        /// items are fenced, as writes through an open file are. Nil elsewhere.
        package let cover: UInt64?
    }

    /// The number of entries, read without the lock: a mount asks on every request.
    private let count = Atomic<Int>(0)
    private let table = Mutex<(next: UInt64, byProcess: [Int32: [Entry]])>((0, [:]))

    package init() {}

    /// Whether any process holds anything: nearly always false, answered without a lock.
    @inline(__always)
    package var isEmpty: Bool { count.load(ordering: .acquiring) == 0 }

    /// How many holds are granted now.
    package var holds: Int { count.load(ordering: .acquiring) }

    /// Records `claim`, granted to `process` (stamped `cover`); the token takes it out again.
    package func add(_ claim: Claim, of process: Int32, cover: UInt64? = nil) -> UInt64 {
        table.withLock { table in
            table.next += 1
            table.byProcess[process, default: []].append(
                Entry(token: table.next, claim: claim, intents: claim.intents, cover: cover))
            count.add(1, ordering: .releasing)
            return table.next
        }
    }

    package func remove(_ token: UInt64, of process: Int32) {
        table.withLock { table in
            guard let index = table.byProcess[process]?.firstIndex(where: { $0.token == token }) else { return }
            table.byProcess[process]!.remove(at: index)
            if table.byProcess[process]!.isEmpty { table.byProcess[process] = nil }
            count.subtract(1, ordering: .releasing)
        }
    }

    /// The hold of `process` that covers one of `targets`, if any: the item itself, or a package
    /// or a directory held for deletion or a move around it (what the hold stands for).
    package func covering(_ targets: some Sequence<AccessTarget>, of process: Int32) -> Entry? {
        if isEmpty { return nil }
        return table.withLock { table -> Entry? in
            guard let entries = table.byProcess[process] else { return nil }
            for target in targets {
                for entry in entries where entry.intents.contains(where: { Self.covers($0, target) }) { return entry }
            }
            return nil
        }
    }

    /// Whether a hold of `intent` stands for an access to `target` too.
    package static func covers(_ intent: Intent, _ target: AccessTarget) -> Bool {
        if intent.path == target.path { return true }
        guard intent.path.isAncestor(of: target.path) else { return false }
        if intent.target.isPackage || target.enclosingPackages.contains(intent.path) { return true }
        guard intent.target.isDirectory, case .writing(let options) = intent.kind else { return false }
        return !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
    }
}
