@testable import Coordination
import Testing

/// A snapshot taken a window at a time (C27): every entry is in exactly one window, in its
/// list's order, the totals count them all, and a list left out comes empty but counted.
@Suite struct SnapshotWindowTests {
    /// Every window of `list`, `limit` entries at a time, each as the keys it carried.
    func windows(
        _ engine: CoordinationEngine, _ list: SnapshotWindow.List, limit: Int,
        keys: (EngineSnapshot) -> [UInt64]
    ) -> [[UInt64]] {
        var pages: [[UInt64]] = []
        var after: UInt64?
        repeat {
            let snapshot = engine.snapshot(
                SnapshotWindow(lists: [list], limit: limit, after: after.map { [list: $0] } ?? [:]))
            pages.append(keys(snapshot))
            after = snapshot.next[list]
        } while after != nil && pages.count < 100
        return pages
    }

    @Test func presentersComeAWindowAtATimeInOrderEachOnce() {
        let engine = CoordinationEngine()
        let ids = (0..<25).map { n in
            engine.addPresenter(PresenterRecord(owner: .process(Int32(100 + n % 3)), path: ItemPath("/p\(n)")!))
        }
        // Removed ones leave gaps in the ids: a window counts entries, not ids.
        engine.removePresenter(ids[3])
        engine.removePresenter(ids[17])
        let pages = windows(engine, .presenters, limit: 10) { $0.presenters.map(\.0.rawValue) }
        #expect(pages.map(\.count) == [10, 10, 3])
        let expected = ids.map(\.rawValue).filter { $0 != ids[3].rawValue && $0 != ids[17].rawValue }.sorted()
        #expect(pages.flatMap { $0 } == expected, "each once, in id order")
        let whole = engine.snapshot(SnapshotWindow(lists: [.presenters], limit: 10))
        #expect(whole.totals[.presenters] == 23 && whole.holders.isEmpty && whole.next[.holders] == nil)
        // Exactly a window's worth: no next window.
        let exact = engine.snapshot(SnapshotWindow(lists: [.presenters], limit: 23))
        #expect(exact.presenters.count == 23 && exact.next[.presenters] == nil)
    }

    @Test func holdersFromTheShortListAndTheTablesShareOneOrder() throws {
        let engine = CoordinationEngine()
        var numbers: [UInt64] = []
        for n in 0..<12 {
            let path = ItemPath("/h\(n)")!
            // Every third through the tables (two intents), the others on the short list.
            let grant: GrantID
            if n % 3 == 0 {
                grant = try #require(
                    engine.acquireAtOnce(
                        AccessRequest(
                            identity: .process(Int32(n + 1)), intents: [.read(path), .read(ItemPath("/t\(n)")!)])))
                #expect(!grant.isOnShortList)
            } else {
                grant = try #require(engine.acquireAtOnce(.read(path), for: .process(Int32(n + 1))))
                #expect(grant.isOnShortList)
            }
            numbers.append(UInt64(n))
        }
        let whole = engine.snapshot()
        let pages = windows(engine, .holders, limit: 4) { snapshot in
            snapshot.holders.map { holder in
                whole.holders.firstIndex { $0.grant == holder.grant }.map(UInt64.init) ?? 999
            }
        }
        // Each three grants weigh four intents (two through the tables, one each listed).
        #expect(pages.map(\.count) == [3, 3, 3, 3])
        #expect(pages.flatMap { $0 } == numbers, "the windows, one after another, are the whole snapshot's order")
        #expect(engine.snapshot(SnapshotWindow(limit: 4)).totals[.holders] == 12)
    }

    /// A hold of many items counts once per item: a window of holders describes at most
    /// `limit` intents, and still takes one hold heavier than that alone.
    @Test func aHolderCountsOncePerIntent() throws {
        let engine = CoordinationEngine()
        for n in 0..<5 {
            let intents = (0..<4).map { Intent.read(ItemPath("/w\(n)/\($0)")!) }
            _ = try #require(engine.acquireAtOnce(AccessRequest(identity: .process(Int32(n + 1)), intents: intents)))
        }
        let heavy = (0..<30).map { Intent.read(ItemPath("/heavy/\($0)")!) }
        _ = try #require(engine.acquireAtOnce(AccessRequest(identity: .process(99), intents: heavy)))
        let pages = windows(engine, .holders, limit: 10) { $0.holders.map { UInt64($0.intents.count) } }
        #expect(pages == [[4, 4], [4, 4], [4], [30]])
    }

    @Test func aListLeftOutComesEmptyAndCounted() {
        let engine = CoordinationEngine()
        for n in 0..<4 { _ = engine.addPresenter(PresenterRecord(owner: .process(7), path: ItemPath("/q\(n)")!)) }
        let snapshot = engine.snapshot(SnapshotWindow(lists: [.holders], limit: 2))
        #expect(snapshot.presenters.isEmpty && snapshot.next[.presenters] == nil)
        #expect(snapshot.totals[.presenters] == 4)
    }
}
