@testable import Coordination
import TestSupport
import Testing

@Suite struct HoldTableTests {
    func hold(_ number: UInt32, on path: ItemPath) -> State.Hold {
        State.Hold(
            grant: GrantID(index: number, generation: 0), identity: .process(Int32(number % 7)),
            kind: LockKind(Intent.write(path)))
    }

    /// Random appends and removals, checked after every step against a dictionary: lookups,
    /// count and iteration agree, whatever the table had to grow or move back on removal.
    @Test(arguments: [(paths: 6, seed: UInt64(1)), (paths: 300, seed: 2), (paths: 40, seed: 0)])
    func agreesWithADictionary(paths pathCount: Int, seed: UInt64) {
        var random = SeededGenerator(seed: seed &+ 17)
        let paths = (0..<pathCount).map { ItemPath("/d\($0 % 5)/item\($0)")! }
        var table = HoldTable(capacity: 8, seed: seed)
        var model: [ItemPath: [UInt32]] = [:]
        var nextGrant: UInt32 = 0
        for _ in 0..<2500 {
            let path = paths[Int.random(in: 0..<paths.count, using: &random)]
            if let held = model[path], !held.isEmpty, Bool.random(using: &random) {
                let grant = held[Int.random(in: 0..<held.count, using: &random)]
                table.remove(grant: GrantID(index: grant, generation: 0), at: path)
                model[path]!.removeAll { $0 == grant }
                if model[path]!.isEmpty { model[path] = nil }
            } else {
                nextGrant += 1
                table.append(hold(nextGrant, on: path), at: path)
                model[path, default: []].append(nextGrant)
            }
            // Every path, not only this one: a removal moves other entries back.
            let mismatched = paths.filter { (table[$0].map { $0.map(\.grant.index) } ?? []) != (model[$0] ?? []) }
            #expect(table.count == model.count && mismatched.isEmpty, "holds differ on \(mismatched)")
        }
        var listed: [ItemPath: [UInt32]] = [:]
        for (path, holds) in table { listed[path] = holds.map(\.grant.index) }
        #expect(listed == model)
    }

    /// Removing a hold that is not there changes nothing.
    @Test func removingWhatIsNotHeldIsHarmless() {
        let path = ItemPath("/a")!
        var table = HoldTable()
        table.remove(grant: GrantID(index: 1, generation: 0), at: path)
        table.append(hold(1, on: path), at: path)
        table.remove(grant: GrantID(index: 2, generation: 0), at: path)
        table.remove(grant: GrantID(index: 1, generation: 0), at: ItemPath("/b")!)
        #expect(table.count == 1 && table[path]?.map(\.grant.index) == [1])
    }
}
