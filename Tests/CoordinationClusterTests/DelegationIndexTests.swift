@testable import CoordinationCluster
import TestSupport
import Testing

/// The replica's index by path answers what a scan of every key answered (the scan the replica
/// and `ClusterMember.delegationPath` made before, kept here as the model), over random keys of
/// three hosts (one of them in two runs) made, made again and given back; and it looks only at
/// the keys around a path, however many there are elsewhere.
struct DelegationIndexTests {
    typealias Entry = Delegations.Entry

    /// This run: host A under lease 1. ("A" under lease 2 is an earlier run: another holder.)
    static let host = "A", lease: Int64 = 1

    /// A recall told: which key wants which, each as made.
    struct Told: Hashable {
        var held: [UInt8], heldRevision: Int64, wanted: [UInt8], wantedRevision: Int64
    }

    /// The model: every key in a dictionary, each question a scan of all of them.
    struct Scan {
        var entries: [[UInt8]: Entry] = [:]

        func isMine(_ entry: Entry) -> Bool {
            entry.host == DelegationIndexTests.host && entry.lease == DelegationIndexTests.lease
        }

        /// Another holder's earlier keys in its way, but those answered.
        func blockers(of entry: Entry) -> [Entry] {
            entries.values.filter {
                !$0.isSameHolder(as: entry) && $0.revision < entry.revision && $0.answer == nil
                    && Delegations.inTheWay($0, of: entry)
            }
        }

        /// Another holder's later keys it is in the way of, but those tentative or answered.
        func wanting(_ held: Entry) -> [Entry] {
            entries.values.filter {
                !$0.isSameHolder(as: held) && $0.revision > held.revision && !$0.isTentative && $0.answer == nil
                    && Delegations.inTheWay(held, of: $0)
            }
        }

        /// Every recall the replica owes: this run's key held (not a question, nor answered),
        /// another's later key that wants it.
        func recalls() -> Set<Told> {
            var pairs: Set<Told> = []
            for (heldKey, held) in entries
            where isMine(held) && held.mode != .asking && held.answer == nil && blockers(of: held).isEmpty {
                for (wantedKey, wanted) in entries
                where !wanted.isSameHolder(as: held) && wanted.revision > held.revision
                    && !wanted.isTentative && wanted.answer == nil && Delegations.inTheWay(held, of: wanted)
                {
                    pairs.insert(
                        Told(
                            held: heldKey, heldRevision: held.revision, wanted: wantedKey,
                            wantedRevision: wanted.revision))
                }
            }
            return pairs
        }

        /// `ClusterMember.delegationPath` as it was: a directory nobody else has a key in or above
        /// that a read or a write there would meet, of any mode (coarser than `inTheWay`: a key
        /// that shares an item, or a question, still keeps a host from taking the directory);
        /// for writers that share, any key but such writers'.
        func outermostFree(for path: String, _ mode: Delegations.Mode, unless excluded: (String) -> Bool) -> String {
            if path.isEmpty { return path }
            let others = entries.values.filter { !isMine($0) }
            let directories = path.indices.filter { path[$0] == "/" }.map { String(path[..<$0]) }
            for candidate in directories {
                let inTheWay = others.contains { other in
                    Delegations.related(other.path, candidate)
                        && (mode.sharesWriters ? !other.mode.sharesWriters : mode.writes || other.mode.writes)
                }
                if !excluded(candidate) && !inTheWay { return candidate }
            }
            return path
        }
    }

    /// A random path: up to three components of a few names, empty ones among them ("a//b",
    /// "/a"), names that begin alike ("a", "ab"); now and then the store's root.
    static func path(_ generator: inout SeededGenerator) -> String {
        if Int.random(in: 0..<12, using: &generator) == 0 { return "" }
        let names = ["a", "ab", "b", "", "a"]
        return (0..<Int.random(in: 1...3, using: &generator)).map { _ in names.randomElement(using: &generator)! }
            .joined(separator: "/")
    }

    static func entry(_ generator: inout SeededGenerator, revision: Int64) -> Entry {
        let (host, lease) = [("A", Int64(1)), ("A", 2), ("B", 3), ("C", 4)].randomElement(using: &generator)!
        let answers: [Delegations.Answer?] = [nil, nil, nil, nil, nil, nil, nil, nil, .passed, .refused("EACCES")]
        return Entry(
            path: path(&generator), host: host, mode: Delegations.Mode.allCases.randomElement(using: &generator)!,
            revision: revision, lease: lease, isTentative: Int.random(in: 0..<5, using: &generator) == 0,
            asksIdle: Int.random(in: 0..<8, using: &generator) == 0, answer: answers.randomElement(using: &generator)!)
    }

    /// The key `Delegations` makes of an entry (less the store's prefix).
    static func key(_ entry: Entry) -> [UInt8] {
        Array(entry.path.utf8) + [0] + Array(entry.host.utf8) + [0] + Array(String(entry.lease, radix: 16).utf8) + [0]
            + Array(entry.mode.rawValue.utf8)
    }

    static func described(_ entries: [Entry]) -> Set<String> {
        Set(
            entries.map {
                "\($0.host)/\($0.lease) \($0.mode.rawValue) '\($0.path)' @\($0.revision)\($0.isTentative ? "?" : "")"
            })
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func theIndexAnswersAsAScanOfEveryKey(seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        var index = DelegationIndex(host: Self.host, lease: Self.lease)
        var scan = Scan()
        var told: Set<Told> = []
        var revision: Int64 = 0
        for step in 0..<1500 {
            // Keys made (a key made again replaces its earlier making) and given back, one or
            // a few at a time (a watch brings them in batches).
            for _ in 0..<[1, 1, 1, 2, 4].randomElement(using: &generator)! {
                if scan.entries.isEmpty || (scan.entries.count < 60 && Bool.random(using: &generator)) {
                    revision += 1
                    let made = Self.entry(&generator, revision: revision)
                    index.put(Self.key(made), made)
                    scan.entries[Self.key(made)] = made
                } else {
                    let key = scan.entries.keys.randomElement(using: &generator)!
                    let removed = index.remove(key), expected = scan.entries.removeValue(forKey: key)
                    #expect(removed == expected)
                }
            }
            #expect(index.count == scan.entries.count)

            // Recalls: what the changes made is owed now, and together with what was told
            // before it is everything owed (as the replica told them, each pair once).
            let changes = index.takeChanges()
            let owed = scan.recalls()
            for pair in index.recalls(after: changes) {
                let made = Told(
                    held: pair.heldKey, heldRevision: pair.held.revision, wanted: pair.wantedKey,
                    wantedRevision: pair.wanted.revision)
                #expect(owed.contains(made), "step \(step): a recall nobody owes: \(pair)")
                told.insert(made)
            }
            told = told.filter {
                scan.entries[$0.held]?.revision == $0.heldRevision
                    && scan.entries[$0.wanted]?.revision == $0.wantedRevision
            }
            #expect(owed.isSubset(of: told), "step \(step): recalls never told: \(owed.subtracting(told))")

            // Questions about keys that are there, and about keys that are not (yet).
            for _ in 0..<4 {
                let other = Int64.random(in: 0...(revision + 1), using: &generator)
                let present =
                    Bool.random(using: &generator) ? scan.entries.values.randomElement(using: &generator) : nil
                let asked = present ?? Self.entry(&generator, revision: other)
                #expect(
                    Self.described(index.blockers(of: asked)) == Self.described(scan.blockers(of: asked)),
                    "step \(step): blockers of \(asked)")
                #expect(index.isBlocked(asked) == !scan.blockers(of: asked).isEmpty)
                #expect(
                    Self.described(index.wanting(asked).map { $0.entry }) == Self.described(scan.wanting(asked)),
                    "step \(step): wanting \(asked)")
                let refused: Set<String> = [Self.path(&generator), Self.path(&generator)]
                // (Asked for reads, writes and writers that share: the other modes are of the
                // item itself.)
                let path = Self.path(&generator),
                    mode = [Delegations.Mode.read, .write, .inPlace, .appending].randomElement(using: &generator)!
                #expect(
                    index.outermostFree(for: path, mode) { refused.contains($0) }
                        == scan.outermostFree(for: path, mode) { refused.contains($0) },
                    "step \(step): where to ask for \(mode) of '\(path)' refusing \(refused)")
            }
        }
        // Given back, all of them: nothing is left to find.
        for key in scan.entries.keys { index.remove(key) }
        #expect(index.count == 0)
        var left = 0
        index.forEachRelated(to: "", .anyone, writesOnly: false) { _, _ in
            left += 1; return true
        }
        #expect(left == 0)
    }

    /// A question about one item looks at the keys around it, not at the thousands beside it:
    /// this is what a request costs (etcd aside), whatever the store holds.
    @Test func aQuestionLooksOnlyAtTheKeysAroundItsPath() {
        var index = DelegationIndex(host: Self.host, lease: Self.lease)
        var revision: Int64 = 0
        func make(_ path: String, _ host: String, _ lease: Int64, _ mode: Delegations.Mode) -> Entry {
            revision += 1
            let made = Entry(path: path, host: host, mode: mode, revision: revision, lease: lease)
            index.put(Self.key(made), made)
            return made
        }
        for number in 0..<3000 { _ = make("shared/b\(number)", "B", 3, .write) }
        for number in 0..<3000 { _ = make("shared/c\(number)", "C", 4, .write) }
        for number in 0..<3000 { _ = make("shared/a\(number)", "A", 1, .write) }
        let presented = make("shared/b17", "A", 1, .presence)
        _ = index.takeChanges()
        var looked = 0
        index.forEachRelated(to: "shared/new", .anyone, writesOnly: false) { _, _ in
            looked += 1; return true
        }
        #expect(looked == 0, "nothing at, above or below a new item")
        index.forEachRelated(to: "shared/b17", .anyone, writesOnly: false) { _, _ in
            looked += 1; return true
        }
        #expect(looked == 2, "its own keys: B's write and A's presence")
        #expect(index.isBlocked(presented) && index.blockers(of: presented).count == 1)
        #expect(
            index.outermostFree(for: "shared/new", .write) { _ in false } == "shared/new", "where hosts meet: the item")
        #expect(
            index.outermostFree(for: "alone/x/y", .write) { _ in false } == "alone",
            "where nobody else is: the directory")
        // Hosts making files side by side: writers in place share the directory.
        let makers = [make("made/b-0", "B", 5, .inPlace), make("made/c-0", "C", 6, .appending)]
        #expect(index.outermostFree(for: "made/a-0", .inPlace) { _ in false } == "made", "beside other makers")
        #expect(index.outermostFree(for: "made/a-0", .write) { _ in false } == "made/a-0", "a writer: the item")
        let reader = make("made/b-0", "C", 7, .read)
        #expect(
            index.outermostFree(for: "made/a-0", .inPlace) { _ in false } == "made/a-0", "beside a reader: the item")
        for entry in makers + [reader] { index.remove(Self.key(entry)) }
        // A key made beside them looks at its own path; given back, at its own path again.
        let created = make("shared/c-new", "C", 4, .write)
        #expect(index.recalls(after: index.takeChanges()).isEmpty)
        index.remove(Self.key(created))
        #expect(index.recalls(after: index.takeChanges()).isEmpty)
    }
}
