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
    }

    private struct Memory {
        var marked: [String: Known] = [:]
        /// Bumped by `forgetAll`, so that a look begun before it is not remembered after it.
        var generation = 0
    }

    private let memory = Mutex(Memory())
    /// `memory.generation`, readable without the lock.
    private let generation = Atomic<Int>(0)
    /// How long an answer is remembered, in milliseconds.
    let lifetime: Int64

    /// Each worker thread's last answer: most requests ask about the directory the previous
    /// one did, and a hit here touches nothing another thread writes.
    private struct LastAnswer {
        var relative = ""
        var known: Known?
        var generation = -1
    }

    private let lastAnswer = ThreadLocal { LastAnswer() }

    init(lifetimeMilliseconds: Int64) { self.lifetime = lifetimeMilliseconds }

    /// Whether the directory at `relative` is marked; `look` asks the backing directory.
    func isMarked(_ relative: String, look: () -> Bool) -> Bool {
        let now = coarseMilliseconds()
        let current = generation.load(ordering: .acquiring)
        let lastKnown = lastAnswer.withValue { last -> Bool? in
            guard let known = last.known, now < known.until, last.generation == current, last.relative == relative
            else { return nil }
            return known.marked
        }
        if let lastKnown { return lastKnown }
        let (remembered, generation) = memory.withLock { ($0.marked[relative], $0.generation) }
        let known: Known
        if let remembered, now < remembered.until {
            known = remembered
        } else {
            known = Known(marked: look(), until: now + lifetime)
            memory.withLock { memory in
                guard memory.generation == generation else { return }
                if memory.marked.count >= 4096 { memory.marked.removeAll(keepingCapacity: true) }
                memory.marked[relative] = known
            }
        }
        lastAnswer.withValue { $0 = LastAnswer(relative: relative, known: known, generation: generation) }
        return known.marked
    }

    /// Changes at each `forgetAll`: answers given before it are void.
    var currentGeneration: Int { generation.load(ordering: .acquiring) }

    func forgetAll() {
        memory.withLock { memory in
            memory.generation += 1
            memory.marked.removeAll(keepingCapacity: true)
            generation.store(memory.generation, ordering: .releasing)
        }
    }
}
