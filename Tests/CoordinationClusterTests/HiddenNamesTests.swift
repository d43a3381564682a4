@testable import CoordinationCluster
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A store's item names hidden from etcd (`HiddenNames`, `--cluster-key-file`): the names keys
/// give paths, the values that carry them sealed, the key file's checks, and the refusal at join
/// of a host that names the store's items otherwise. No etcd: `HiddenNamesInEtcdTests` has two
/// hosts at work.
@Suite struct HiddenNamesTests {
    static let secret = Array(repeating: UInt8(7), count: 32)
    static let otherSecret = Array(repeating: UInt8(8), count: 32)
    static let names = HiddenNames(secret: secret, store: "s")

    /// The components of a name (or a path).
    static func components(_ text: String) -> [Substring] {
        text.split(separator: "/", omittingEmptySubsequences: false)
    }

    @Test func aPathIsNamedAlikeAndItsDirectorysNameBeginsIt() {
        let names = Self.names
        let file = names.name(of: "projects/film/scene.blend")
        #expect(file == HiddenNames(secret: Self.secret, store: "s").name(of: "projects/film/scene.blend"))
        #expect(file.hasPrefix(names.name(of: "projects/film") + "/"))
        #expect(names.name(of: "projects/film").hasPrefix(names.name(of: "projects") + "/"))
        #expect(Self.components(file).count == 3)
        #expect(Self.components(file).allSatisfy { $0.count == 2 * HiddenNames.nameBytes })
        #expect(names.name(of: "") == "", "the store's root")
        // An empty component stays empty: the root is the directory of "/a", as in clear.
        #expect(names.name(of: "/a").hasPrefix("/") && Self.components(names.name(of: "/a")).count == 2)
    }

    @Test func oneNameInTwoDirectoriesIsNamedApart() {
        let first = Self.components(Self.names.name(of: "a/Makefile")).last
        let second = Self.components(Self.names.name(of: "b/Makefile")).last
        #expect(first != second)
    }

    @Test func anotherSecretOrStoreNamesItemsApart() {
        let other = HiddenNames(secret: Self.otherSecret, store: "s")
        let otherStore = HiddenNames(secret: Self.secret, store: "t")
        for path in ["projects", "projects/film/scene.blend"] {
            #expect(Self.names.name(of: path) != other.name(of: path))
            #expect(Self.names.name(of: path) != otherStore.name(of: path))
        }
        #expect(Self.names.verifier != other.verifier)
        #expect(Self.names.verifier == HiddenNames(secret: Self.secret, store: "s").verifier)
    }

    @Test func noComponentsTextIsInItsName() {
        let path = "projects/film/scene.blend"
        let name = Self.names.name(of: path)
        for component in Self.components(path) { #expect(!name.contains(component), "\(component) in \(name)") }
        #expect(name.allSatisfy { $0 == "/" || $0.isHexDigit })
    }

    @Test func aSealedValueOpensWithItsSecretAndForItsKeyOnly() {
        let key = Array("/coordfs/s/presence/A\0".utf8) + Array(Self.names.name(of: "projects/film").utf8)
        let path = Array("projects/film".utf8)
        let sealed = Self.names.seal(path, for: key)
        #expect(Self.names.unseal(sealed, for: key) == path)
        #expect(!String(decoding: sealed, as: UTF8.self).contains("film"))
        #expect(Self.names.seal(path, for: key) != sealed, "a fresh nonce each time")
        #expect(HiddenNames(secret: Self.otherSecret, store: "s").unseal(sealed, for: key) == nil, "another secret")
        #expect(HiddenNames(secret: Self.secret, store: "t").unseal(sealed, for: key) == nil, "another store")
        #expect(Self.names.unseal(sealed, for: key + [0x41]) == nil, "put under another key")
        #expect(Self.names.unseal(path, for: key) == nil, "never sealed")
        #expect(Self.names.unseal([], for: key) == nil)
    }

    /// Without hidden names a key is as it has always been; with them, the key names no
    /// component, the replica reads the delegation whole from the value, and the reads around
    /// a directory take its items' keys in.
    @Test func delegationKeysHideThePathAndTheValueCarriesIt() throws {
        let entry = Delegations.Entry(
            path: "projects/film/scene.blend", host: "A", mode: .write, revision: 12, lease: 0x2a, request: "w0/p")
        let clear = DelegationKeys(store: "s", space: .delegations)
        #expect(clear.key(of: entry) == Array("/coordfs/s/delegations/projects/film/scene.blend\0A\02a\0w".utf8))
        #expect(clear.value(of: entry, at: clear.key(of: entry)) == Array("w|w0/p".utf8))

        let hidden = DelegationKeys(store: "s", space: .delegations, names: Self.names)
        let key = hidden.key(of: entry)
        let text = String(decoding: key, as: UTF8.self)
        #expect(text.hasPrefix("/coordfs/s/delegations/") && text.hasSuffix("\0A\02a\0w"))
        for word in ["projects", "film", "scene"] { #expect(!text.contains(word), "\(text)") }
        let value = hidden.value(of: entry, at: key)
        let read = try #require(
            hidden.entry(EtcdKeyValue(key: key, value: value, createRevision: 12, lease: 0x2a)))
        #expect(read == entry)
        let otherSecret = DelegationKeys(
            store: "s", space: .delegations, names: HiddenNames(secret: Self.otherSecret, store: "s"))
        #expect(otherSecret.entry(EtcdKeyValue(key: key, value: value, createRevision: 12, lease: 0x2a)) == nil)

        // The reads of a request for "projects" cover the file's key (inside it), and a
        // request for the file reads the key of "projects" (above it).
        func covered(_ key: [UInt8], by reads: [EtcdOperation]) -> Bool {
            reads.contains { read in
                guard case .range(let start, let prefix) = read else { return false }
                return prefix ? key.starts(with: start) : key == start
            }
        }
        let directory = hidden.key(
            of: Delegations.Entry(path: "projects", host: "B", mode: .read, revision: 13, lease: 7))
        #expect(covered(key, by: hidden.neighbourhood(of: "projects")))
        #expect(covered(directory, by: hidden.neighbourhood(of: "projects/film/scene.blend")))
        #expect(!covered(key, by: hidden.neighbourhood(of: "projects/other")), "a sibling's reads")
    }

    /// Runs `body` in a directory of its own, removed after.
    static func inDirectory(_ body: (URL) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-hidden-names-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try body(directory)
    }

    /// Why the key file at `path` is refused ("accepted" if it is not).
    static func refusal(_ path: String) -> String {
        do throws(HiddenNames.KeyFileError) {
            _ = try HiddenNames.secret(inFile: path)
            return "accepted"
        } catch {
            return error.description
        }
    }

    @Test func aKeyFileThatIsShortOrReadableByOthersIsRefusedNamingIt() throws {
        try Self.inDirectory { directory in
            let path = directory.appendingPathComponent("cluster.key").path
            #expect(Self.refusal(path) == "the cluster key file '\(path)' does not exist")
            try Data(repeating: 1, count: 16).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            #expect(
                Self.refusal(path)
                    == "the cluster key file '\(path)' holds 16 bytes, and a cluster key at least 32 "
                    + "(head -c 32 /dev/urandom >FILE)")
            let secret = (0..<33).map { UInt8($0) }
            try Data(secret).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            #expect(try HiddenNames.secret(inFile: path) == secret, "every byte, the last too")
            chmod(path, 0o640)
            #expect(
                Self.refusal(path)
                    == "the cluster key file '\(path)' may be read by other users (mode 0640): a secret is "
                    + "readable by its owner alone (chmod 600)")
            chmod(path, 0o604)
            #expect(Self.refusal(path).contains("may be read by other users (mode 0604)"))
            #expect(Self.refusal(directory.path) == "the cluster key file '\(directory.path)' is not a regular file")
        }
    }

    /// A record as another host of the store would have it: `names`, its secret's verifier.
    static func other(_ host: String, names: String?) -> (host: String, record: HostRecord?, lease: Int64) {
        var record = HostRecord.this(release: "9.9.9", ttl: 5, names: names)
        record.machine = "another machine"
        return (host, record, 1)
    }

    @Test func aHostThatNamesTheStoreOtherwiseIsRefused() throws {
        let ours = Self.names.verifier, theirs = HiddenNames(secret: Self.otherSecret, store: "s").verifier
        #expect(HostRecord.conflict(of: "B", names: ours, with: [Self.other("A", names: ours)]) == nil)
        #expect(HostRecord.conflict(of: "B", with: [Self.other("A", names: nil)]) == nil, "both in clear")
        let cases: [(String?, String?, String)] = [
            (
                nil, ours,
                "host 'A' of this store keeps its file names in clear in etcd, and this host hides them (--cluster-key-file): every host of a store must be given the same key file, or none"
            ),
            (
                ours, nil,
                "host 'A' of this store hides its file names in etcd (--cluster-key-file), and this host was given no key file: every host of a store must be given the same key file"
            ),
            (
                theirs, ours,
                "host 'A' of this store hides its file names with another key (--cluster-key-file): every host of a store must be given the same key file"
            )
        ]
        for (other, this, why) in cases {
            let found = try #require(HostRecord.conflict(of: "B", names: this, with: [Self.other("A", names: other)]))
            #expect(found.0 == .names(host: "A", theirs: other, ours: this))
            #expect(found.0.description == why)
        }
        // The verifier travels in the record, and a record in clear says nothing of names.
        let record = HostRecord.this(release: "9.9.9", ttl: 5, names: ours)
        #expect(try JSONDecoder().decode(HostRecord.self, from: JSONEncoder().encode(record)) == record)
        let clear = try JSONEncoder().encode(HostRecord.this(release: "9.9.9", ttl: 5))
        #expect(!String(decoding: clear, as: UTF8.self).contains("names"))
    }
}

/// Two hosts that hide the store's names, against one etcd on loopback: they share items as in
/// clear, and no key or value in etcd names a file; a host that names the store otherwise is
/// refused at join.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct HiddenNamesInEtcdTests {
    static let names = HiddenNames(secret: HiddenNamesTests.secret, store: "s")

    static func member(
        _ name: String, _ client: EtcdClient, _ local: ClusterMemberTests.Local = ClusterMemberTests.Local()
    ) async throws -> ClusterMember {
        let names = Self.names
        let member = ClusterMember(
            join: {
                let lease = try await HostLease.grant(on: client, ttl: 5)
                let delegations = Delegations(client: client, store: "s", host: name, lease: lease, names: names)
                try await delegations.start()
                return delegations
            }, local: local, breakTime: nil, idleTime: nil)
        try await member.start()
        return member
    }

    static func joining(_ name: String, _ client: EtcdClient, _ names: HiddenNames?) async throws -> Delegations {
        let lease = try await HostLease.grant(on: client, ttl: 5)
        let host = Delegations(client: client, store: "s", host: name, lease: lease, names: names)
        do { try await host.start(release: "9.9.9") } catch {
            _ = try? await lease.revoke()
            throw error
        }
        return host
    }

    /// What a test's background reader of a stream saw last.
    final class Seen<Value: Sendable>: Sendable {
        let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
    }

    /// Every key and value of store "s" as text, after `condition` holds of them (or a few seconds).
    static func store(_ client: EtcdClient, when condition: ([String]) -> Bool) async throws -> [(String, String)] {
        var found: [(String, String)] = []
        for _ in 0..<100 {
            found = try await client.get(Array("/coordfs/s/".utf8), prefix: true).values.map {
                (String(decoding: $0.key, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
            }
            if condition(found.map { $0.0 }) { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        return found
    }

    @Test func twoHostsShareItemsAndNoKeyOrValueNamesThem() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let localA = ClusterMemberTests.Local()
        let a = try await Self.member("A", client, localA), b = try await Self.member("B", client)
        let presences = Seen<[String: Set<String>]>([:]), changes = Seen<[HostNews.Change]>([])
        let readers = [
            Task { for await byHost in a.presences { presences.value.withLock { $0 = byHost } } },
            Task { for await batch in b.changesElsewhere { changes.value.withLock { $0 += batch.changes } } }
        ]
        defer { for reader in readers { reader.cancel() } }

        // As in clear (`ClusterMemberTests.aRecallNarrowsTheDelegationAroundWhatGoesOn`): B's
        // read recalls A's directory, which A narrows around what its program holds.
        try await a.acquire("projects/film/scene.blend", .write)
        localA.hold("projects/film/scene.blend", .write)
        #expect(ClusterMemberTests.keys(a) == ["A w projects"], "the path read out of the value")
        try await b.acquire("projects/notes/todo.txt", .read)
        #expect(b.covers("projects/notes/todo.txt", .read) && a.covers("projects/film/scene.blend", .write))
        #expect(
            await ClusterMemberTests.eventually {
                Set(ClusterMemberTests.keys(a)) == ["A w projects/film", "B r projects/notes/todo.txt"]
            }, "\(ClusterMemberTests.keys(a))")
        #expect(
            await ClusterMemberTests.eventually { localA.begun.last == "B r projects/notes/todo.txt" },
            "A began B's read of the path sealed in its key's value: \(localA.begun)")

        // Presences, news and status, sealed.
        await b.present(["projects/notes/todo.txt"])
        #expect(
            await ClusterMemberTests.eventually(seconds: 5) {
                presences.value.withLock { $0["B"] } == ["projects/notes/todo.txt"]
            }, "A sees B's presence")
        a.send(HostNews.Change(.change, "projects/notes/todo.txt"), to: "B")
        #expect(
            await ClusterMemberTests.eventually(seconds: 5) {
                changes.value.withLock { $0 } == [HostNews.Change(.change, "projects/notes/todo.txt")]
            }, "B hears A's change")
        a.answerStatus { Array("A holds projects/film/scene.blend".utf8) }
        #expect(await b.askStatus()["A"] == Array("A holds projects/film/scene.blend".utf8))

        // News for a host nobody runs stays in etcd, as does every key and value above it.
        a.send(HostNews.Change(.move, "projects/film/scene.blend", to: "projects/film/final.blend"), to: "C")
        let stored = try await Self.store(client) { keys in
            let news = keys.contains { $0.hasPrefix("/coordfs/s/news/C/") }
            let presence = keys.contains { $0.hasPrefix("/coordfs/s/presence/") }
            return news && presence && keys.filter { $0.hasPrefix("/coordfs/s/delegations/") }.count == 2
        }
        let keys = stored.map { $0.0 }
        #expect(keys.contains { $0.hasPrefix("/coordfs/s/news/C/") }, "\(keys)")
        #expect(keys.contains { $0.hasPrefix("/coordfs/s/presence/B\0") }, "\(keys)")
        #expect(keys.filter { $0.hasPrefix("/coordfs/s/delegations/") }.count == 2, "\(keys)")
        for (key, value) in stored {
            for word in ["projects", "film", "scene", "final", "notes", "todo", "blend"] {
                #expect(!key.contains(word) && !value.contains(word), "\(word) in \(key.debugDescription)")
            }
        }
        await a.leave()
        await b.leave()
    }

    @Test func aHostThatNamesTheStoreOtherwiseIsRefusedAtJoin() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let hiding = try await Self.joining("A", client, Self.names)
        await #expect(
            throws: Delegations.Failure.cannotJoin(
                "host 'A' of this store hides its file names in etcd (--cluster-key-file), and this host was given no key file: every host of a store must be given the same key file"
            )
        ) {
            _ = try await Self.joining("B", client, nil)
        }
        await #expect(
            throws: Delegations.Failure.cannotJoin(
                "host 'A' of this store hides its file names with another key (--cluster-key-file): every host of a store must be given the same key file"
            )
        ) {
            _ = try await Self.joining("B", client, HiddenNames(secret: HiddenNamesTests.otherSecret, store: "s"))
        }
        let alike = try await Self.joining("B", client, Self.names)
        await alike.leave()
        await hiding.leave()

        let clear = try await Self.joining("C", client, nil)
        await #expect(
            throws: Delegations.Failure.cannotJoin(
                "host 'C' of this store keeps its file names in clear in etcd, and this host hides them (--cluster-key-file): every host of a store must be given the same key file, or none"
            )
        ) {
            _ = try await Self.joining("D", client, Self.names)
        }
        await clear.leave()
    }
}
