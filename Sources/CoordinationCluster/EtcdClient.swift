import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

/// One key's value in etcd, with the revisions that order it.
public struct EtcdKeyValue: Sendable, Equatable {
    public var key: [UInt8]
    public var value: [UInt8]
    /// The revision that made the key (0: it does not exist).
    public var createRevision: Int64
    public var modRevision: Int64
    public var lease: Int64

    init(_ message: EtcdKeyValueMessage) {
        key = message.key.bytes
        value = message.value?.bytes ?? []
        createRevision = message.create_revision?.value ?? 0
        modRevision = message.mod_revision?.value ?? 0
        lease = message.lease?.value ?? 0
    }
}

/// What etcd answered, or could not: errors carry etcd's own message.
public enum EtcdError: Error, CustomStringConvertible, Equatable {
    /// No member answered (each was unreachable, or had no leader).
    case unavailable(String)
    /// A member refused the request (a lease not found, a compacted revision).
    case refused(code: Int, message: String)
    /// An answer that is not etcd's.
    case malformed(String)
    /// A watch ended because the revision it started from was compacted.
    case compacted(revision: Int64)

    public var description: String {
        switch self {
        case .unavailable(let why): "etcd is unavailable: \(why)"
        case .refused(let code, let message): "etcd refused (\(code)): \(message)"
        case .malformed(let what): "etcd answered something unexpected: \(what)"
        case .compacted(let revision): "etcd compacted its history up to revision \(revision)"
        }
    }
}

/// A condition of a transaction on one key.
public struct EtcdCompare: Sendable {
    let key: [UInt8]
    /// The key's create revision the condition asks for (0: it does not exist).
    let createRevision: Int64

    /// The key does not exist.
    public static func absent(_ key: [UInt8]) -> Self { Self(key: key, createRevision: 0) }
    /// The key was made at `revision` (it is the same key, not one made again).
    public static func created(_ key: [UInt8], at revision: Int64) -> Self { Self(key: key, createRevision: revision) }

    var message: EtcdCompareMessage {
        EtcdCompareMessage(
            key: EtcdBytes(key), target: "CREATE", result: "EQUAL", create_revision: EtcdInteger(createRevision))
    }
}

/// One operation of a transaction.
public enum EtcdOperation: Sendable {
    case put(key: [UInt8], value: [UInt8], lease: Int64?)
    case delete(key: [UInt8])
    case range(key: [UInt8], prefix: Bool)

    var message: EtcdRequestOp {
        switch self {
        case let .put(key, value, lease):
            EtcdRequestOp(
                request_put: EtcdPutRequest(
                    key: EtcdBytes(key), value: EtcdBytes(value), lease: lease.map(EtcdInteger.init)))
        case let .delete(key):
            EtcdRequestOp(request_delete_range: EtcdDeleteRequest(key: EtcdBytes(key)))
        case let .range(key, prefix):
            EtcdRequestOp(
                request_range: EtcdRangeRequest(
                    key: EtcdBytes(key), range_end: prefix ? EtcdBytes(EtcdClient.prefixEnd(key)) : nil))
        }
    }
}

/// What a transaction did: whether its conditions held, the revision after it, and what its
/// range operations read.
public struct EtcdTransactionResult: Sendable {
    public var succeeded: Bool
    public var revision: Int64
    public var ranges: [[EtcdKeyValue]]
}

/// A change a watch reports.
public struct EtcdEvent: Sendable, Equatable {
    public enum Kind: Sendable { case put, delete }
    public var kind: Kind
    public var keyValue: EtcdKeyValue
}

/// A client of an etcd cluster through its JSON gateway (etcd 3.4's `/v3/...`), over
/// AsyncHTTPClient. Each request goes to the member that answered last, and to the next on a
/// connection failure or when a member has no leader (asked to say so at once rather than wait
/// for one, with the gateway's `hasleader` header).
public final class EtcdClient: Sendable {
    public let endpoints: [String]
    private let http: HTTPClient
    /// The member that answered last, asked first.
    private let preferred = Mutex(0)
    /// How long one member may take to answer a request.
    let requestTimeout: TimeAmount

    /// `endpoints`: `http://HOST:PORT` of the cluster's members.
    public init(endpoints: [String], requestTimeout: Duration = .seconds(3)) {
        precondition(!endpoints.isEmpty, "an etcd client needs at least one endpoint")
        self.endpoints = endpoints.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        http = Self.sharedHTTP
        self.requestTimeout = .nanoseconds(
            Int64(requestTimeout.components.seconds) * 1_000_000_000
                + requestTimeout.components.attoseconds / 1_000_000_000)
    }

    /// The HTTP client of every etcd client in the process, never shut down (as
    /// `HTTPClient.shared`), but made for a cluster: a member that refuses or does not answer a
    /// connection within a second is given up at once and the next one tried, where
    /// `HTTPClient.shared` tries the same member again until the request's deadline (a watch
    /// has none: it stayed with a dead member for good).
    private static let sharedHTTP: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.timeout.connect = .seconds(1)
        configuration.connectionPool.retryConnectionEstablishment = false
        // Each host follows several prefixes with a watch apiece, each holding a connection for
        // good (HTTP/1.1): the default of 8 per member left requests waiting for a connection.
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    // MARK: Keys

    @discardableResult
    public func put(_ key: [UInt8], _ value: [UInt8], lease: Int64? = nil) async throws(EtcdError) -> Int64 {
        let response: EtcdPutResponse = try await call(
            "/v3/kv/put",
            EtcdPutRequest(key: EtcdBytes(key), value: EtcdBytes(value), lease: lease.map(EtcdInteger.init)))
        return response.header?.revision?.value ?? 0
    }

    /// The key's value, or every key under it as a prefix; and the revision they were read at.
    public func get(
        _ key: [UInt8], prefix: Bool = false
    ) async throws(EtcdError) -> (revision: Int64, values: [EtcdKeyValue]) {
        let response: EtcdRangeResponse = try await call(
            "/v3/kv/range",
            EtcdRangeRequest(key: EtcdBytes(key), range_end: prefix ? EtcdBytes(Self.prefixEnd(key)) : nil))
        return (response.header?.revision?.value ?? 0, (response.kvs ?? []).map(EtcdKeyValue.init))
    }

    /// Deletes the key (or every key under it as a prefix): how many were deleted.
    @discardableResult
    public func delete(_ key: [UInt8], prefix: Bool = false) async throws(EtcdError) -> Int64 {
        let response: EtcdDeleteResponse = try await call(
            "/v3/kv/deleterange",
            EtcdDeleteRequest(key: EtcdBytes(key), range_end: prefix ? EtcdBytes(Self.prefixEnd(key)) : nil))
        return response.deleted?.value ?? 0
    }

    /// If every condition holds, `success`, else `failure`, at one revision.
    public func transaction(
        _ conditions: [EtcdCompare], success: [EtcdOperation],
        failure: [EtcdOperation] = []
    ) async throws(EtcdError) -> EtcdTransactionResult {
        let response: EtcdTxnResponse = try await call(
            "/v3/kv/txn",
            EtcdTxnRequest(
                compare: conditions.map(\.message), success: success.map(\.message), failure: failure.map(\.message)))
        let ranges = (response.responses ?? []).compactMap {
            $0.response_range.map { ($0.kvs ?? []).map(EtcdKeyValue.init) }
        }
        return EtcdTransactionResult(
            succeeded: response.succeeded ?? false, revision: response.header?.revision?.value ?? 0,
            ranges: ranges)
    }

    // MARK: Leases

    /// A new lease of `ttl` seconds (etcd raises it to its minimum): its id and granted TTL.
    public func grantLease(ttl: Int64) async throws(EtcdError) -> (id: Int64, ttl: Int64) {
        let response: EtcdLeaseGrantResponse = try await call(
            "/v3/lease/grant", EtcdLeaseGrantRequest(TTL: EtcdInteger(ttl)))
        guard let id = response.ID?.value, id != 0 else { throw .malformed("a lease grant without an id") }
        return (id, response.TTL?.value ?? ttl)
    }

    /// Renews the lease: its TTL from now, or nil when it has expired or was revoked.
    public func keepAlive(_ lease: Int64) async throws(EtcdError) -> Int64? {
        let response: EtcdLeaseKeepAliveResponse = try await call(
            "/v3/lease/keepalive", EtcdLeaseIDRequest(ID: EtcdInteger(lease)))
        // Only a result without a TTL says the lease is gone; no result at all says nothing of it.
        guard let result = response.result else {
            throw .unavailable(response.error?.message ?? "keepalive answered no result")
        }
        guard let ttl = result.TTL?.value, ttl > 0 else { return nil }
        return ttl
    }

    /// Ends the lease: its keys are deleted. A lease already gone is not an error: false then
    /// (it had expired, or was revoked before), true when etcd still had it.
    @discardableResult
    public func revoke(_ lease: Int64) async throws(EtcdError) -> Bool {
        do {
            let _: EtcdHeaderOnly = try await call("/v3/lease/revoke", EtcdLeaseIDRequest(ID: EtcdInteger(lease)))
            return true
        } catch .refused(let code, _) where code == 5 {
            return false  // not found
        }
    }

    /// The seconds the lease has left in etcd, or nil when it has expired or was revoked (or
    /// never was). Not a renewal.
    public func timeToLive(_ lease: Int64) async throws(EtcdError) -> Int64? {
        let response: EtcdLeaseTimeToLiveResponse = try await call(
            "/v3/lease/timetolive", EtcdLeaseIDRequest(ID: EtcdInteger(lease)))
        // -1 for a lease etcd does not have; a TTL of 0 is left out, as every zero is.
        let left = response.TTL?.value ?? 0
        return left < 0 ? nil : left
    }

    // MARK: Watches

    /// Every change under `prefix` from `revision` on (nil: from now), in order, batch by batch,
    /// each with the revision of its last change (a replay comes in several batches, whose
    /// header names the store's revision, not theirs). Ends with an error when the member is lost or
    /// has no leader, and with `.compacted` when `revision` is no longer kept; the caller
    /// resumes from its last revision + 1.
    public func watch(
        prefix: [UInt8], from revision: Int64?
    ) -> AsyncThrowingStream<(revision: Int64, events: [EtcdEvent]), Error> {
        let (stream, continuation) = AsyncThrowingStream<(revision: Int64, events: [EtcdEvent]), Error>.makeStream()
        let task = Task { [self] in
            do {
                try await watching(prefix: prefix, from: revision, continuation)
                continuation.finish(throwing: EtcdError.unavailable("the watch ended"))
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    private func watching(
        prefix: [UInt8], from revision: Int64?,
        _ continuation: AsyncThrowingStream<(revision: Int64, events: [EtcdEvent]), Error>.Continuation
    ) async throws {
        let body = EtcdWatchRequest(
            create_request: EtcdWatchCreate(
                key: EtcdBytes(prefix), range_end: EtcdBytes(Self.prefixEnd(prefix)),
                start_revision: revision.map(EtcdInteger.init),
                progress_notify: true))
        let encoded = try JSONEncoder().encode(body)
        var lastError = "no member answered"
        for endpoint in orderedEndpoints() {
            var request = HTTPClientRequest(url: endpoint + "/v3/watch")
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "Grpc-Metadata-hasleader", value: "true")
            request.body = .bytes(ByteBuffer(bytes: encoded))
            let response: HTTPClientResponse
            do {
                // No deadline: the stream lasts (the client's connect and read timeouts apply).
                response = try await http.execute(request, deadline: .distantFuture)
            } catch {
                lastError = "\(endpoint): \(error)"
                continue
            }
            guard response.status == .ok else {
                let text = String(buffer: (try? await response.body.collect(upTo: 1 << 20)) ?? ByteBuffer())
                lastError = "\(endpoint): \(response.status.code) \(text)"
                continue
            }
            var pending: [UInt8] = []
            for try await chunk in response.body {
                pending += chunk.readableBytesView
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = Array(pending[..<newline])
                    pending.removeSubrange(...newline)
                    if line.isEmpty { continue }
                    let decoded: EtcdWatchLine
                    do { decoded = try JSONDecoder().decode(EtcdWatchLine.self, from: Data(line)) } catch {
                        throw EtcdError.malformed(String(decoding: line, as: UTF8.self))
                    }
                    if let failure = decoded.error {
                        throw EtcdError.unavailable(failure.message ?? "the watch failed")
                    }
                    guard let result = decoded.result else { continue }
                    if result.canceled == true {
                        if let compacted = result.compact_revision?.value {
                            throw EtcdError.compacted(revision: compacted)
                        }
                        throw EtcdError.unavailable("the watch was canceled")
                    }
                    guard let events = result.events, !events.isEmpty else { continue }  // created, progress
                    let revision =
                        events.compactMap { $0.kv.mod_revision?.value }.max() ?? result.header?.revision?.value ?? 0
                    continuation.yield(
                        (
                            revision,
                            events.map {
                                EtcdEvent(kind: $0.type == "DELETE" ? .delete : .put, keyValue: EtcdKeyValue($0.kv))
                            }
                        ))
                }
            }
            return
        }
        throw EtcdError.unavailable(lastError)
    }

    // MARK: Calls

    private struct EtcdHeaderOnly: Decodable { var header: EtcdHeader? }

    /// Sends `body` to `path` on the preferred member, then the others in turn.
    private func call<Request: Encodable, Response: Decodable>(
        _ path: String, _ body: Request
    ) async throws(EtcdError) -> Response {
        let encoded: Data
        do { encoded = try JSONEncoder().encode(body) } catch { throw .malformed("\(error)") }
        var lastError = "no member answered"
        let first = preferred.withLock { $0 }
        for (index, endpoint) in orderedEndpoints(from: first).enumerated() {
            var request = HTTPClientRequest(url: endpoint + path)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "Grpc-Metadata-hasleader", value: "true")
            request.body = .bytes(ByteBuffer(bytes: encoded))
            let bytes: ByteBuffer
            let status: HTTPResponseStatus
            do {
                let response = try await http.execute(request, timeout: requestTimeout)
                status = response.status
                bytes = try await response.body.collect(upTo: 8 << 20)
            } catch {
                lastError = "\(endpoint): \(error)"
                continue
            }
            let data = Data(bytes.readableBytesView)
            if status == .ok {
                let answered = (first + index) % endpoints.count
                preferred.withLock { $0 = answered }
                do { return try JSONDecoder().decode(Response.self, from: data) } catch {
                    throw .malformed("\(path): \(String(decoding: data, as: UTF8.self))")
                }
            }
            let failure = try? JSONDecoder().decode(EtcdErrorBody.self, from: data)
            let message = failure?.error ?? failure?.message ?? String(decoding: data, as: UTF8.self)
            // Unavailable (no leader, timed out) or unknown: another member may serve it.
            if status == .serviceUnavailable || failure?.code == 14 || failure?.code == 2 {
                lastError = "\(endpoint): \(message)"
                continue
            }
            throw .refused(code: failure?.code ?? Int(status.code), message: message)
        }
        throw .unavailable(lastError)
    }

    private func orderedEndpoints(from first: Int? = nil) -> [String] {
        let first = first ?? preferred.withLock { $0 }
        return Array(endpoints[first...] + endpoints[..<first])
    }

    /// The end of the range of keys that start with `prefix`: its last byte less than 0xff
    /// incremented, the rest dropped; a single 0 byte (every key after) if there is none.
    static func prefixEnd(_ prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xff { end[end.count - 1] = last + 1; return end }
            end.removeLast()
        }
        return [0]
    }
}
