@testable import CoordFSMount
import Testing
import TestSupport

@Suite struct ShardedDictionaryBehaviour {
    /// The same answers as one dictionary, through random inserts, replacements and removals.
    @Test func answersAsOneDictionary() {
        var generator = SeededGenerator(seed: 21)
        var sharded = ShardedDictionary<UInt64, Int>()
        var reference: [UInt64: Int] = [:]
        for step in 0..<60_000 {
            let key = UInt64.random(in: 0..<3_000, using: &generator) &* 4_096
            if Bool.random(using: &generator) {
                sharded[key] = step
                reference[key] = step
            } else {
                #expect(sharded.removeValue(forKey: key) == reference.removeValue(forKey: key))
            }
        }
        #expect(sharded.count == reference.count)
        for key in UInt64(0)..<3_000 { #expect(sharded[key &* 4_096] == reference[key &* 4_096]) }
        #expect(Set(sharded.values) == Set(reference.values))
    }

    /// Keys whose probes all start at one shard's last slot wrap around to its first, and
    /// every order of removing them leaves the rest found (each removal moves the ones after
    /// it back over the gap), and nothing else.
    @Test func removalsKeepCollidingKeysFound() {
        let crowd = (0..<6).map { Self.key(spread: 0x03F0_0000_0000_0000 | UInt64($0 + 1)) }
        let strangers = (0..<3).map { Self.key(spread: 0x0010_0000_0000_0000 | UInt64($0 + 1)) }
        #expect(Set((crowd + strangers).map(\.shard)) == [0])
        for order in Self.orders(of: Array(crowd.indices)) {
            var sharded = ShardedDictionary<UInt64, Int>()
            for (index, key) in (crowd + strangers).enumerated() { sharded[key] = index }
            var left = Set(crowd.indices)
            for removing in order {
                let removed = sharded.removeValue(forKey: crowd[removing])
                left.remove(removing)
                #expect(removed == removing)
                for index in crowd.indices { #expect(sharded[crowd[index]] == (left.contains(index) ? index : nil)) }
                for (index, key) in strangers.enumerated() { #expect(sharded[key] == crowd.count + index) }
                #expect(sharded.count == left.count + strangers.count)
            }
            #expect(sharded.removeValue(forKey: crowd[0]) == nil)
        }
    }

    /// Values removed, replaced, moved by a shard's growth or left in the table when it goes
    /// are each released once.
    @Test func valuesAreReleasedOnce() {
        final class Tracked {}
        var watched: [Weak<Tracked>] = []
        do {
            var sharded = ShardedDictionary<UInt64, Tracked>()
            for key in UInt64(0)..<5_000 {
                let value = Tracked()
                watched.append(Weak(value))
                sharded[key % 3_000] = value
            }
            for key in UInt64(0)..<1_000 { sharded[key * 3] = nil }
            #expect(watched.filter { $0.value != nil }.count == 2_000)
            #expect(sharded.count == 2_000)
        }
        #expect(watched.allSatisfy { $0.value == nil })
    }

    /// The key whose spread is `spread`: the spread's multiplier is odd, so it has an inverse.
    private static func key(spread: UInt64) -> UInt64 {
        let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
        var inverse = multiplier
        for _ in 0..<6 { inverse = inverse &* (2 &- multiplier &* inverse) }
        let key = spread &* inverse
        precondition(key.spread == spread)
        return key
    }

    private static func orders(of items: [Int]) -> [[Int]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { index in
            var rest = items
            let first = rest.remove(at: index)
            return orders(of: rest).map { [first] + $0 }
        }
    }

    /// Consecutive numbers and numbers 64 apart (inode numbers in chunks) fill every shard
    /// about evenly, so that none grows much bigger than its share.
    @Test(arguments: [UInt64(1), 64, 4096])
    func keysSpreadOverEveryShard(stride: UInt64) {
        var counts = [Int](repeating: 0, count: 64)
        for index in UInt64(0)..<6_400 { counts[(index &* stride &+ 2).shard] += 1 }
        #expect(counts.min()! >= 50 && counts.max()! <= 150, "\(counts)")
    }
}

private struct Weak<Object: AnyObject> {
    weak var value: Object?
    init(_ value: Object) { self.value = value }
}
