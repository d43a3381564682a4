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
///
/// With the store's names hidden (`HiddenNames`), a presence key has the path's hidden name, and
/// its value the path sealed; the news and the status answers, which name paths, are sealed.
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
    private let names: HiddenNames?
    private let presencePrefix: [UInt8]
    private let newsPrefix: String
    private let statusPrefix: String
    /// What this host answers when another asks for its status.
    private let statusAnswer = Mutex<(@Sendable () -> [UInt8])?>(nil)
    private let state = Mutex(State())
    private let tasks = Mutex<[Task<Void, Never>]>([])
    let presences: AsyncStream<[String: Set<String>]>
    private let presenceSink: AsyncStream<[String: Set<String>]>.Continuation
    let received: AsyncStream<Batch>
    private let receivedSink: AsyncStream<Batch>.Continuation

    private struct State {
        /// This host's presented items: as last published (nil: not known, after a failure),
        /// and as they are to be, while a publisher runs.
        var published: Set<String>? = []
        var wanted: Set<String> = []
        var publishing = false
        /// Every host's, by presence key.
        var presence: [[UInt8]: (host: String, path: String)] = [:]
        /// Changes waiting to be sent, by receiving host, and the hosts a sender runs for.
        var outgoing: [String: [Change]] = [:]
        var sending: Set<String> = []
        var sent = 0
    }

    init(delegations: Delegations) {
        client = delegations.client
        host = delegations.host
        lease = delegations.lease
        names = delegations.keys.names
        presencePrefix = Array("/coordfs/\(delegations.store)/presence/".utf8)
        newsPrefix = "/coordfs/\(delegations.store)/news/"
        statusPrefix = "/coordfs/\(delegations.store)/status/"
        (presences, presenceSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (received, receivedSink) = AsyncStream.makeStream()
    }

    deinit { stop() }

    /// Reads the presences and this host's news, and starts following both.
    func start() async throws(EtcdError) {
        let presenceRevision = try await readPresence()
        let newsRevision = try await readNews()
        let following = [
            Task { [self] in
                await follow(presencePrefix, from: presenceRevision + 1, reread: { [self] in try await readPresence() })
                {
                    self.presenceChanged($0)
                }
            },
            Task { [self] in
                await follow(newsKey, from: newsRevision + 1, reread: { [self] in try await readNews() }) {
                    self.newsArrived($0)
                }
            },
            Task { [self] in
                let asks = Array((statusPrefix + "ask/").utf8)
                await follow(
                    asks, from: newsRevision + 1,
                    reread: { [self] in
                        try await client.get(Array(statusPrefix.utf8)).revision
                    }
                ) { self.statusAsked($0) }
            }
        ]
        tasks.withLock { $0 += following }
    }

    /// This host's news prefix.
    private var newsKey: [UInt8] { Array((newsPrefix + host + "/").utf8) }

    /// Reads every presence anew: the revision read at.
    private func readPresence() async throws(EtcdError) -> Int64 {
        let (revision, values) = try await client.get(presencePrefix, prefix: true)
        state.withLock { state in
            state.presence = [:]
            for value in values { if let found = presence(value) { state.presence[value.key] = found } }
        }
        announce()
        return revision
    }

    /// Takes in the news waiting for this host (sent before it followed them, or while it
    /// could not): the revision read at.
    private func readNews() async throws(EtcdError) -> Int64 {
        let (revision, values) = try await client.get(newsKey, prefix: true)
        newsArrived(values.map { EtcdEvent(kind: .put, keyValue: $0) })
        return revision
    }

    func stop() {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        presenceSink.finish()
        receivedSink.finish()
    }

    // MARK: Presence

    /// Publishes the items this host's presenters present: one publisher at a time, what
    /// changed since it last published, in transactions of at most 100 operations (etcd takes
    /// 128); after a failure, everything again, a second later.
    func present(_ paths: Set<String>) async {
        let first = state.withLock { state -> Bool in
            state.wanted = paths
            defer { state.publishing = true }
            return !state.publishing
        }
        guard first else { return }  // the publisher under way takes it
        while !Task.isCancelled {
            let step = state.withLock { state -> (wanted: Set<String>, published: Set<String>?)? in
                if state.published == state.wanted {
                    state.publishing = false
                    return nil
                }
                return (state.wanted, state.published)
            }
            guard let step else { return }
            do throws(EtcdError) {
                var operations: [EtcdOperation]
                if let published = step.published {
                    operations = step.wanted.subtracting(published).map { presencePut($0) }
                    operations += published.subtracting(step.wanted).map { .delete(key: presenceKey($0)) }
                } else {
                    try await client.delete(ownPresencePrefix, prefix: true)
                    operations = step.wanted.map { presencePut($0) }
                }
                var rest = operations[...]
                while !rest.isEmpty {
                    _ = try await client.transaction([], success: Array(rest.prefix(100)))
                    rest = rest.dropFirst(100)
                }
                state.withLock { $0.published = step.wanted }
            } catch {
                state.withLock { $0.published = nil }
                try? await Task.sleep(for: .seconds(1))
            }
        }
        state.withLock { $0.publishing = false }
    }

    private var ownPresencePrefix: [UInt8] {
        presencePrefix + Array(host.utf8) + [0] + Array(String(lease.id, radix: 16).utf8) + [0]
    }

    private func presenceKey(_ path: String) -> [UInt8] {
        ownPresencePrefix + Array((names?.name(of: path) ?? path).utf8)
    }

    /// The put of this host's presence of `path`: with hidden names, the path sealed as its value.
    private func presencePut(_ path: String) -> EtcdOperation {
        let key = presenceKey(path)
        return .put(key: key, value: names?.seal(Array(path.utf8), for: key) ?? [], lease: lease.id)
    }

    /// The host and the path of a presence key: the path the key's, or, with hidden names, the
    /// value's.
    private func presence(_ found: EtcdKeyValue) -> (host: String, path: String)? {
        guard found.key.starts(with: presencePrefix) else { return nil }
        let parts = found.key[presencePrefix.count...].split(
            separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let path: [UInt8]?
        if let names { path = names.unseal(found.value, for: found.key) } else { path = Array(parts[2]) }
        guard let path else { return nil }
        return (String(decoding: parts[0], as: UTF8.self), String(decoding: path, as: UTF8.self))
    }

    /// `bytes` as the value of `key`: sealed, with hidden names.
    private func sealed(_ bytes: [UInt8], for key: [UInt8]) -> [UInt8] { names?.seal(bytes, for: key) ?? bytes }

    /// A value `sealed` wrote; nil, with hidden names, when this host's secret does not open it.
    private func opened(_ found: EtcdKeyValue) -> [UInt8]? {
        guard let names else { return found.value }
        return names.unseal(found.value, for: found.key)
    }

    private func presenceChanged(_ events: [EtcdEvent]) {
        state.withLock { state in
            for event in events {
                switch event.kind {
                case .put: if let found = presence(event.keyValue) { state.presence[event.keyValue.key] = found }
                case .delete: state.presence[event.keyValue.key] = nil
                }
            }
        }
        announce()
    }

    /// Tells `presences` every other host's presented items.
    private func announce() {
        let byHost = state.withLock { state in
            Dictionary(grouping: state.presence.values.filter { $0.host != host }, by: { $0.host }).mapValues {
                Set($0.map { $0.path })
            }
        }
        presenceSink.yield(byHost)
    }

    // MARK: Status

    /// What this host answers other hosts' `askStatus` with.
    func answerStatus(with answer: @escaping @Sendable () -> [UInt8]) {
        statusAnswer.withLock { $0 = answer }
    }

    /// Every other host's status, as each answers within `wait`: asked through a key of this
    /// host's lease, answered under it, and all deleted after.
    func askStatus(wait: Duration = .milliseconds(400)) async -> [String: [UInt8]] {
        let nonce = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let asked = host + "\u{0}" + nonce
        let ask = Array((statusPrefix + "ask/" + asked).utf8)
        let answers = Array((statusPrefix + "answer/" + asked + "/").utf8)
        guard (try? await client.put(ask, [], lease: lease.id)) != nil else { return [:] }
        try? await Task.sleep(for: wait)
        let values = (try? await client.get(answers, prefix: true).values) ?? []
        _ = try? await client.delete(ask)
        _ = try? await client.delete(answers, prefix: true)
        var byHost: [String: [UInt8]] = [:]
        for value in values { byHost[String(decoding: value.key[answers.count...], as: UTF8.self)] = opened(value) }
        return byHost
    }

    private func statusAsked(_ events: [EtcdEvent]) {
        let prefix = Array((statusPrefix + "ask/").utf8)
        for event in events where event.kind == .put && event.keyValue.key.starts(with: prefix) {
            let asked = event.keyValue.key[prefix.count...]
            guard let asker = asked.split(separator: 0).first, String(decoding: asker, as: UTF8.self) != host,
                let answer = statusAnswer.withLock({ $0 })
            else { continue }
            let key = Array((statusPrefix + "answer/").utf8) + asked + Array(("/" + host).utf8)
            // (A host's status names the paths its programs hold.)
            Task { [client, lease, names] in
                let status = answer()
                _ = try? await client.put(key, names?.seal(status, for: key) ?? status, lease: lease.id)
            }
        }
    }

    // MARK: News

    /// Queues `change` for `receiver`: sent within a few milliseconds, with the others queued
    /// meanwhile, each once; one batch after the other, in order.
    func send(_ change: Change, to receiver: String) {
        let starts = state.withLock { state -> Bool in
            if !(state.outgoing[receiver]?.contains(change) ?? false) {
                state.outgoing[receiver, default: []].append(change)
            }
            return state.sending.insert(receiver).inserted
        }
        guard starts else { return }
        Task { [self] in
            while true {
                try? await Task.sleep(for: .milliseconds(5))
                let (changes, number) = state.withLock { state -> ([Change], Int) in
                    let changes = state.outgoing.removeValue(forKey: receiver) ?? []
                    if changes.isEmpty { state.sending.remove(receiver) }
                    state.sent += 1
                    return (changes, state.sent)
                }
                if changes.isEmpty { return }
                guard let encoded = try? JSONEncoder().encode(changes) else { continue }
                let key =
                    Array((newsPrefix + receiver + "/" + host).utf8) + [0] + Array(String(lease.id, radix: 16).utf8) + [
                        0
                    ]
                    + Array(String(number).utf8)
                _ = try? await client.put(key, sealed(Array(encoded), for: key), lease: lease.id)
            }
        }
    }

    private func newsArrived(_ events: [EtcdEvent]) {
        for event in events where event.kind == .put {
            let key = event.keyValue.key
            let name = key.split(separator: UInt8(ascii: "/")).last.flatMap { $0.split(separator: 0).first }
            guard let name, let content = opened(event.keyValue),
                let changes = try? JSONDecoder().decode([Change].self, from: Data(content))
            else { continue }
            receivedSink.yield(Batch(host: String(decoding: name, as: UTF8.self), changes: changes))
            Task { [client] in _ = try? await client.delete(key) }
        }
    }

    /// Follows changes under `prefix` from `revision`; after a lost connection from where it
    /// stopped; after a compaction, from a new reading (`reread`).
    private func follow(
        _ prefix: [UInt8], from revision: Int64, reread: @escaping @Sendable () async throws -> Int64,
        _ handle: @escaping @Sendable ([EtcdEvent]) -> Void
    ) async {
        var next = revision
        while !Task.isCancelled {
            do {
                for try await batch in client.watch(prefix: prefix, from: next) {
                    handle(batch.events)
                    next = batch.revision + 1
                }
            } catch EtcdError.compacted {
                if let revision = try? await reread() {
                    next = revision + 1
                } else {
                    try? await Task.sleep(for: .milliseconds(200))
                }
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
