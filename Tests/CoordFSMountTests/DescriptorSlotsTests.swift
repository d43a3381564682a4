@testable import CoordFSMount
import TestSupport
import Testing

/// `DescriptorSlots.age(evicting:of:)`: the age up to which an eviction closes descriptors, found
/// from a sample of the slots' last uses (distinct, as the clock's; `UInt64.max` for slots never
/// evicted or free).
@Suite struct DescriptorSlotsEviction {
    /// How many of `uses` an eviction up to `age` closes.
    static func evicted(_ uses: [UInt64], upTo age: UInt64) -> Int { uses.count { $0 <= age } }

    /// Uses 1...count, shuffled, with every seventh slot never evicted.
    static func uses(_ count: Int, shuffled: Bool, using generator: inout SeededGenerator) -> [UInt64] {
        var uses = (1...UInt64(count)).map { $0 % 7 == 0 ? UInt64.max : $0 }
        if shuffled { uses.shuffle(using: &generator) }
        return uses
    }

    /// Up to 1024 uses, every one is in the sample: exactly `count` go.
    @Test(arguments: [16, 100, 1024])
    func smallTablesEvictExactlyTheOldest(size: Int) {
        var generator = SeededGenerator(seed: UInt64(size))
        let uses = Self.uses(size, shuffled: true, using: &generator)
        let evictable = uses.count { $0 != .max }
        for count in [1, 2, size / 10, evictable - 1] where count > 0 {
            let age = DescriptorSlots.age(evicting: count, of: uses)
            #expect(Self.evicted(uses, upTo: age) == count, "\(count) of \(size)")
            #expect(uses.filter { $0 <= age }.allSatisfy { $0 != .max })
        }
    }

    /// 12 000 slots and more, a tenth to go, filled in order (a first walk) or in any order:
    /// exactly the oldest tenth, though only a sample and a bracket of them are looked at.
    @Test(arguments: [false, true])
    func largeTablesEvictExactlyTheOldest(shuffled: Bool) {
        var generator = SeededGenerator(seed: shuffled ? 7 : 8)
        for trial in 0..<10 {
            let uses = Self.uses(12_000 + trial * 3_137, shuffled: shuffled, using: &generator)
            for count in [1, 1200, uses.count / 2] {
                #expect(
                    Self.evicted(uses, upTo: DescriptorSlots.age(evicting: count, of: uses)) == count,
                    "\(count) of \(uses.count)")
            }
        }
    }

    /// The selection both steps use.
    @Test(arguments: [1, 2, 7, 100, 1201])
    func selectFindsTheValueOfEachRank(count: Int) {
        var generator = SystemRandomNumberGenerator()
        for trial in 0..<20 {
            // Distinct values (as the clock's), then repeated ones: the selection must not rely
            // on either.
            let range = trial % 2 == 0 ? UInt64(count * 1000) : UInt64(max(2, count / 4))
            let values = (0..<count).map { _ in UInt64.random(in: 0..<range, using: &generator) }
            let sorted = values.sorted()
            let ranks = count <= 100 ? Array(0..<count) : [0, count / 3, count / 2, count - 2, count - 1]
            for rank in ranks {
                var scratch = values
                #expect(DescriptorSlots.select(rank, in: &scratch) == sorted[rank], "rank \(rank) of \(values)")
            }
        }
    }

    /// More to evict than can be: every evictable one, and none never evicted.
    @Test func moreThanThereAreEvictsAllThatCanGo() {
        var generator = SeededGenerator(seed: 9)
        let uses = Self.uses(5000, shuffled: true, using: &generator)
        let age = DescriptorSlots.age(evicting: 6000, of: uses)
        #expect(Self.evicted(uses, upTo: age) == uses.count { $0 != .max })
    }
}
