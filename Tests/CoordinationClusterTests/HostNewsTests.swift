@testable import CoordinationCluster
import Foundation
import Testing

/// What hosts tell each other for their presenters: presences and changes.
@Suite(.serialized, .enabled(if: EtcdServers.installed, "etcd is not installed (make setup installs etcd-server)"))
struct HostNewsTests {
    static func news(_ name: String, _ client: EtcdClient) async throws -> HostNews {
        let lease = try await HostLease.grant(on: client, ttl: 5)
        let news = HostNews(delegations: Delegations(client: client, store: "s", host: name, lease: lease))
        try await news.start()
        return news
    }

    @Test func presencesAreFollowedAndChangesReachTheirHostOnceEach() async throws {
        let servers = try EtcdServers()
        defer { servers.stop() }
        let client = EtcdClient(endpoints: servers.clientURLs)
        let a = try await Self.news("A", client), b = try await Self.news("B", client)
        defer { a.stop(); b.stop() }
        await b.present(["docs/report", "notes"])
        var presences = a.presences.makeAsyncIterator()
        var seen: [String: Set<String>]? = [:]
        while let current = seen, current["B"] != ["docs/report", "notes"] { seen = await presences.next() }
        await b.present(["notes"])
        while let current = seen, current["B"] != ["notes"] { seen = await presences.next() }
        #expect(seen?["A"] == nil, "a host's own presence is not told to it")

        var received = b.received.makeAsyncIterator()
        a.send(HostNews.Change(.change, "notes"), to: "B")
        a.send(HostNews.Change(.change, "notes"), to: "B")  // the same change, batched: once
        a.send(HostNews.Change(.move, "notes", to: "notes-2"), to: "B")
        let batch = await received.next()
        #expect(batch?.host == "A")
        #expect(batch?.changes == [HostNews.Change(.change, "notes"), HostNews.Change(.move, "notes", to: "notes-2")])
        // Read news is deleted.
        let left = try await client.get(Array("/coordfs/s/news/".utf8), prefix: true).values
        var gone = left.isEmpty
        for _ in 0..<50 where !gone {
            try await Task.sleep(for: .milliseconds(20))
            gone = try await client.get(Array("/coordfs/s/news/".utf8), prefix: true).values.isEmpty
        }
        #expect(gone)
    }
}
