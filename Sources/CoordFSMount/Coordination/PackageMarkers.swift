import LinuxSystem
import CoordinationRuntime
import Synchronization

/// Which directories of the mount are file packages by their marker file (`ItemLocatorMarker`),
/// remembered for the kernel's attribute-cache time: looking costs a lookup in the backing
/// directory for every directory around every coordinated request. Markers made or removed
/// through the mount, and renames and removals of directories, forget everything at once; a
/// marker made behind the mount's back counts within that time, as other changes made there do.
final class PackageMarkers: Sendable {
    private struct Known {
        let marked: Bool
        let until: Int64
        /// The generation it was learnt in: void once `forgetAll` has moved on.
        let generation: Int
    }

    /// The answers remembered, in shards of their own lock: every coordinated request asks
    /// about each directory around its items (a socket hold of 64 items, 64 times), from many
    /// threads at once, and one lock for all of them was where those threads queued.
    private let shards: [Shard] = (0..<16).map { _ in Shard() }

    private final class Shard: Sendable {
        let marked = Mutex<[String: Known]>([:])
    }
    /// Bumped by `forgetAll`; an answer learnt in an earlier generation is not believed.
    private let generation = Atomic<Int>(0)
    /// How long an answer is remembered, in milliseconds.
    let lifetime: Int64

    /// Each worker thread's last answer: most requests ask about the directory the previous
    /// one did, and a hit here touches nothing another thread writes.
    private struct LastAnswer {
        var relative = ""
        var known: Known?
    }

    private let lastAnswer = ThreadLocal { LastAnswer() }

    init(lifetimeMilliseconds: Int64) { self.lifetime = lifetimeMilliseconds }

    /// Whether the directory at `relative` is marked; `look` asks the backing directory.
    func isMarked(_ relative: String, look: () -> Bool) -> Bool {
        let now = coarseMilliseconds()
        let current = generation.load(ordering: .acquiring)
        func believed(_ known: Known?) -> Known? {
            guard let known, now < known.until, known.generation == current else { return nil }
            return known
        }
        if let known = lastAnswer.withValue({ $0.relative == relative ? believed($0.known) : nil }) {
            return known.marked
        }
        let shard = shards[Int(UInt(bitPattern: relative.hashValue) % UInt(shards.count))]
        let known: Known
        if let remembered = believed(shard.marked.withLock { $0[relative] }) {
            known = remembered
        } else {
            known = Known(marked: look(), until: now + lifetime, generation: current)
            shard.marked.withLock { marked in
                // A forgetAll since the look began: the answer may be of before it.
                guard generation.load(ordering: .acquiring) == current else { return }
                if marked.count >= 256 { marked.removeAll(keepingCapacity: true) }
                marked[relative] = known
            }
        }
        lastAnswer.withValue { $0 = LastAnswer(relative: relative, known: known) }
        return known.marked
    }

    /// Changes at each `forgetAll`: answers given before it are void.
    var currentGeneration: Int { generation.load(ordering: .acquiring) }

    func forgetAll() {
        generation.wrappingAdd(1, ordering: .releasing)
        for shard in shards { shard.marked.withLock { $0.removeAll(keepingCapacity: true) } }
    }
}
