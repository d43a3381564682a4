@testable import CoordinationCluster
import Testing

/// When a write open on a host of a shared store is fenced (`CoverLosses`): by the first loss of
/// cover after its grant that reaches its item, and by no other. No etcd.
struct CoverLossesTests {
    @Test func anOpenIsJudgedOnlyByTheLossesAfterItsGrant() {
        var losses = CoverLosses()
        let before = losses.last
        #expect(losses.judge("a/doc", since: before) == 0, "nothing lost: admitted through the stamp")
        _ = losses.record(.around(["a/doc"]))
        let after = losses.last
        #expect(losses.judge("a/doc", since: before) == nil, "granted before the recall was broken: fenced")
        #expect(losses.judge("a/doc", since: after) == after, "granted after it: admitted")
    }

    /// A broken recall reaches the items the other host was given, what is inside them and the
    /// directories around them; nothing beside them.
    @Test func aBrokenRecallReachesTheItemsAroundTheKeysGiven() {
        var losses = CoverLosses()
        _ = losses.record(.around(["a/b"]))
        #expect(losses.judge("a/b", since: 0) == nil)
        #expect(losses.judge("a/b/c", since: 0) == nil, "inside the item given")
        #expect(losses.judge("a", since: 0) == nil, "a directory that holds it")
        #expect(losses.judge("a/bc", since: 0) == 1, "beside it: not reached")
        #expect(losses.judge("x", since: 0) == 1)
        var root = CoverLosses()
        _ = root.record(.around([""]))
        #expect(root.judge("anything/at/all", since: 0) == nil, "the store's root holds everything")
    }

    /// A lost lease reaches everything until the rejoin narrows it to the items that were this
    /// host's all along; the stamp then moves on past it for those.
    @Test func aLostLeaseReachesAllButTheItemsCarriedOver() {
        var losses = CoverLosses()
        let run = losses.record(.allBut([]))
        #expect(losses.judge("kept", since: 0) == nil && losses.judge("other", since: 0) == nil)
        losses.narrow(run, to: .allBut(["kept"]))
        #expect(losses.judge("kept", since: 0) == run, "re-delegated with nobody in between")
        #expect(losses.judge("other", since: 0) == nil)
        // A later broken recall still fences the carried one, judged from where it got to.
        _ = losses.record(.around(["kept"]))
        #expect(losses.judge("kept", since: run) == nil)
    }

    /// An open kept across more losses than are remembered is fenced: a forgotten one may have
    /// reached it.
    @Test func anOpenOlderThanTheLossesKeptIsFenced() {
        var losses = CoverLosses()
        for _ in 0...CoverLosses.limit { _ = losses.record(.around(["elsewhere"])) }
        #expect(losses.kept.count == CoverLosses.limit)
        #expect(losses.judge("doc", since: 0) == nil, "stamped before a forgotten loss")
        #expect(losses.judge("doc", since: losses.forgottenThrough) == losses.last, "stamped after it: judged as ever")
    }
}
