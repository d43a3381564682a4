import Foundation
import Synchronization

/// What hosts of a shared store tell each other so that presenters on one hear what programs on
/// another did: the items each host's presenters present, and the changes made to them.
///
/// A host publishes the items its presenters present as keys of its lease
/// (`<store>/presence/<host>\0<lease>\0<path>`); the others follow them. A host whose programs
/// change such an item sends the presenting host the change, batched a few milliseconds and
/// each change once, as one key under the receiver's news prefix
/// (`<store>/news/<receiver>/<sender>\0<lease>\0<number>`, of the sender's lease); the receiver
/// follows its prefix, and deletes each key once read.
public final class HostNews: Sendable {
    /// A change another host's programs made.
    public struct Change: Codable, Sendable, Hashable {
        public enum Kind: String, Codable, Sendable { case change, appear, delete, move }
        public var kind: Kind
        /// Below the store's root.
        public var path: String
        /// Where a move went.
        public var destination: String?

        public init(_ kind: Kind, _ path: String, to destination: String? = nil) {
            self.kind = kind
            self.path = path
            self.destination = destination
        }
    }

    /// Changes a host sent.
    public struct Batch: Sendable {
        public var host: String
        public var changes: [Change]
    }

    private let client: EtcdClient
    private let host: String
    private let lease: HostLease
    private let presencePrefix: [UInt8]
    private let newsPrefix: String
    private let state = Mutex(State())
    private let tasks = Mutex<[Task<Void, Never>]>([])
    let presences: AsyncStream<[String: Set<String>]>
    private let presenceSink: AsyncStream<[String: Set<String>]>.Continuation
    let received: AsyncStream<Batch>
    private let receivedSink: AsyncStream<Batch>.Continuation

    private struct State {
        /// This host's presented items, as published.
        var published: Set<String> = []
        /// Every host's, by presence key.
        var presence: [[UInt8]: (host: String, path: String)] = [:]
        /// Changes waiting to be sent, by receiving host.
        var outgoing: [String: [Change]] = [:]
        var sent = 0
    }

    init(delegations: Delegations) {
        client = delegations.client
        host = delegations.host
        lease = delegations.lease
        presencePrefix = Array("/coordfs/\(delegations.store)/presence/".utf8)
        newsPrefix = "/coordfs/\(delegations.store)/news/"
        (presences, presenceSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (received, receivedSink) = AsyncStream.makeStream()
    }

    deinit { stop() }

    /// Reads the presences and starts following them and this host's news.
    func start() async throws(EtcdError) {
        let (revision, values) = try await client.get(presencePrefix, prefix: true)
        state.withLock { state in
            for value in values { if let found = presence(value.key) { state.presence[value.key] = found } }
        }
        announce()
        let news = Array((newsPrefix + host + "/").utf8)
        let following = [
            Task { [self] in await follow(presencePrefix, from: revision + 1) { self.presenceChanged($0) } },
            Task { [self] in await follow(news, from: revision + 1) { self.newsArrived($0) } },
        ]
        tasks.withLock { $0 += following }
    }

    func stop() {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        presenceSink.finish()
        receivedSink.finish()
    }

    // MARK: Presence

    /// Publishes the items this host's presenters present (what changed since the last call).
    func present(_ paths: Set<String>) async {
        let (added, removed) = state.withLock { state -> (Set<String>, Set<String>) in
            defer { state.published = paths }
            return (paths.subtracting(state.published), state.published.subtracting(paths))
        }
        var operations: [EtcdOperation] = added.map { .put(key: presenceKey($0), value: [], lease: lease.id) }
        operations += removed.map { .delete(key: presenceKey($0)) }
        if operations.isEmpty { return }
        _ = try? await client.transaction([], success: operations)
    }

    private func presenceKey(_ path: String) -> [UInt8] {
        presencePrefix + Array(host.utf8) + [0] + Array(String(lease.id, radix: 16).utf8) + [0] + Array(path.utf8)
    }

    private func presence(_ key: [UInt8]) -> (host: String, path: String)? {
        guard key.starts(with: presencePrefix) else { return nil }
        let parts = key[presencePrefix.count...].split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        return (String(decoding: parts[0], as: UTF8.self), String(decoding: parts[2], as: UTF8.self))
    }

    private func presenceChanged(_ events: [EtcdEvent]) {
        state.withLock { state in
            for event in events {
                switch event.kind {
                case .put: if let found = presence(event.keyValue.key) { state.presence[event.keyValue.key] = found }
                case .delete: state.presence[event.keyValue.key] = nil
                }
            }
        }
        announce()
    }

    /// Tells `presences` every other host's presented items.
    private func announce() {
        let byHost = state.withLock { state in
            Dictionary(grouping: state.presence.values.filter { $0.host != host }, by: { $0.host }).mapValues { Set($0.map { $0.path }) }
        }
        presenceSink.yield(byHost)
    }

    // MARK: News

    /// Queues `change` for `receiver`: sent within a few milliseconds, with the others queued
    /// meanwhile, each once.
    func send(_ change: Change, to receiver: String) {
        let first = state.withLock { state -> Bool in
            let first = state.outgoing[receiver] == nil
            if !(state.outgoing[receiver]?.contains(change) ?? false) { state.outgoing[receiver, default: []].append(change) }
            return first
        }
        guard first else { return }
        Task { [self] in
            try? await Task.sleep(for: .milliseconds(5))
            let (changes, number) = state.withLock { state -> ([Change], Int) in
                state.sent += 1
                return (state.outgoing.removeValue(forKey: receiver) ?? [], state.sent)
            }
            guard let encoded = try? JSONEncoder().encode(changes) else { return }
            let key = Array((newsPrefix + receiver + "/" + host).utf8) + [0] + Array(String(lease.id, radix: 16).utf8) + [0]
                + Array(String(number).utf8)
            _ = try? await client.put(key, Array(encoded), lease: lease.id)
        }
    }

    private func newsArrived(_ events: [EtcdEvent]) {
        for event in events where event.kind == .put {
            let key = event.keyValue.key
            let name = key.split(separator: UInt8(ascii: "/")).last.flatMap { $0.split(separator: 0).first }
            guard let name, let changes = try? JSONDecoder().decode([Change].self, from: Data(event.keyValue.value)) else { continue }
            receivedSink.yield(Batch(host: String(decoding: name, as: UTF8.self), changes: changes))
            Task { [client] in _ = try? await client.delete(key) }
        }
    }

    /// Follows changes under `prefix` from `revision`, after a lost connection from where it
    /// stopped (after a compaction, from now: what was missed is missed).
    private func follow(_ prefix: [UInt8], from revision: Int64, _ handle: @escaping @Sendable ([EtcdEvent]) -> Void) async {
        var next: Int64? = revision
        while !Task.isCancelled {
            do {
                for try await batch in client.watch(prefix: prefix, from: next) {
                    handle(batch.events)
                    next = batch.revision + 1
                }
            } catch EtcdError.compacted {
                next = nil
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
