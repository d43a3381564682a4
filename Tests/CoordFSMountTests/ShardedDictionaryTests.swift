@testable import CoordFSMount
import Testing
import TestSupport

@Suite struct ShardedDictionaryBehaviour {
    /// The same answers as one dictionary, through random inserts, replacements and removals.
    @Test func answersAsOneDictionary() {
        var generator = SeededGenerator(seed: 21)
        var sharded = ShardedDictionary<UInt64, Int>()
        var reference: [UInt64: Int] = [:]
        for step in 0..<20_000 {
            let key = UInt64.random(in: 0..<3_000, using: &generator)
            if Bool.random(using: &generator) {
                sharded[key] = step
                reference[key] = step
            } else {
                sharded[key] = nil
                reference[key] = nil
            }
        }
        #expect(sharded.count == reference.count)
        for key in UInt64(0)..<3_000 { #expect(sharded[key] == reference[key]) }
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
