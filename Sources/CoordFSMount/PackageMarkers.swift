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
    private let lifetime: Int64

    init(lifetimeMilliseconds: Int64) { self.lifetime = lifetimeMilliseconds }

    /// Whether the directory at `relative` is marked; `look` asks the backing directory.
    func isMarked(_ relative: String, look: () -> Bool) -> Bool {
        let now = coarseMilliseconds()
        let (known, generation) = memory.withLock { ($0.marked[relative], $0.generation) }
        if let known, now < known.until { return known.marked }
        let marked = look()
        memory.withLock { memory in
            guard memory.generation == generation else { return }
            if memory.marked.count >= 4096 { memory.marked.removeAll(keepingCapacity: true) }
            memory.marked[relative] = Known(marked: marked, until: now + lifetime)
        }
        return marked
    }

    func forgetAll() {
        memory.withLock { memory in
            memory.generation += 1
            memory.marked.removeAll(keepingCapacity: true)
        }
    }
}
