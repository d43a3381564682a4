/// The granted calls, kept in slots that are reused once released. A grant's id names its slot,
/// so finding a grant is an index, not a hash: a grant is looked up when it ends and whenever a
/// hold of it is weighed. (A mount's one-item grants are mostly on the short list instead.)
///
/// Each reuse of a slot bumps its generation, which is part of the id: a stale id (a grant ended
/// twice, a late `finishMessaging`) finds nothing instead of someone else's grant.
struct GrantTable: Sequence {
    fileprivate struct Slot {
        var generation: UInt32
        var record: State.GrantRecord?
        /// Whether `record` is there: asked without loading the record (which would copy it).
        var isLive: Bool
        /// While empty: the next empty slot.
        var nextVacant: UInt32 = GrantTable.none
    }

    private static let none = UInt32.max
    private var slots: [Slot] = []
    /// The empty slots, chained through the slots themselves and reused last-in first-out, so
    /// that the live ones stay few and close together and a grant touches no second array.
    private var firstVacant = GrantTable.none
    /// Live grants.
    private(set) var count = 0

    /// Stores `record` in a free slot and returns its id.
    mutating func insert(_ record: consuming State.GrantRecord) -> GrantID {
        count += 1
        if firstVacant != Self.none {
            let index = Int(firstVacant)
            firstVacant = slots[index].nextVacant
            // 31 bits: a generation never reads as the short list's flag.
            slots[index].generation = (slots[index].generation &+ 1) & 0x7fff_ffff
            slots[index].record = record
            slots[index].isLive = true
            return GrantID(index: UInt32(index), generation: slots[index].generation)
        }
        slots.append(Slot(generation: 0, record: record, isLive: true))
        return GrantID(index: UInt32(slots.count - 1), generation: 0)
    }

    /// The record of a live grant; setting nil is not allowed (use `remove`).
    subscript(id: GrantID) -> State.GrantRecord? {
        get {
            guard let index = liveIndex(id) else { return nil }
            return slots[index].record
        }
        _modify {
            // Only live grants are modified in place; a stale id yields a scratch nil.
            if let index = liveIndex(id) {
                yield &slots[index].record
                precondition(slots[index].record != nil, "a grant is ended with remove(_:)")
            } else {
                var none: State.GrantRecord? = nil
                yield &none
            }
        }
    }

    /// Ends a grant's slot and returns its record; nil for an id that is not live.
    mutating func remove(_ id: GrantID) -> State.GrantRecord? {
        guard let index = liveIndex(id) else { return nil }
        let record = slots[index].record.take()
        slots[index].isLive = false
        count -= 1
        slots[index].nextVacant = firstVacant
        firstVacant = UInt32(index)
        return record
    }

    struct Iterator: IteratorProtocol {
        fileprivate let slots: [Slot]
        fileprivate var index = 0

        mutating func next() -> (id: GrantID, record: State.GrantRecord)? {
            while index < slots.count {
                defer { index += 1 }
                if let record = slots[index].record {
                    return (GrantID(index: UInt32(index), generation: slots[index].generation), record)
                }
            }
            return nil
        }
    }

    /// Every live grant, in no particular order (a snapshot sorts by `GrantRecord.number`).
    func makeIterator() -> Iterator { Iterator(slots: slots) }

    /// Reads a live grant's record where it lies; nil for an id that is not live. The
    /// subscript's getter copies the record, which is several references (as many retains and
    /// releases), and the engine looks at every conflicting hold's grant under its lock.
    func readRecord<Result>(_ id: GrantID, _ body: (borrowing State.GrantRecord) -> Result) -> Result? {
        slots.withUnsafeBufferPointer { slots in
            let index = Int(id.index)
            guard index < slots.count, slots[index].generation == id.generation, slots[index].isLive else {
                return nil
            }
            return body(slots[index].record.unsafelyUnwrapped)
        }
    }

    private func liveIndex(_ id: GrantID) -> Int? {
        slots.withUnsafeBufferPointer { slots in
            let index = Int(id.index)
            guard index < slots.count, slots[index].generation == id.generation, slots[index].isLive else {
                return nil
            }
            return index
        }
    }
}
