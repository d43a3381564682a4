import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
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

    /// A key as etcd would give it (tests read keys of their own making).
    init(key: [UInt8], value: [UInt8], createRevision: Int64, modRevision: Int64? = nil, lease: Int64) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision ?? createRevision
        self.lease = lease
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
    /// etcd would not take this client's credentials (its user and password, or none where it
    /// wants them), or a file of them cannot be used: what is wrong, naming the user or file.
    case credentials(String)

    public var description: String {
        switch self {
        case .unavailable(let why): "etcd is unavailable: \(why)"
        case .refused(let code, let message): "etcd refused (\(code)): \(message)"
        case .malformed(let what): "etcd answered something unexpected: \(what)"
        case .compacted(let revision): "etcd compacted its history up to revision \(revision)"
        case .credentials(let why): why
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
/// for one, with the gateway's `hasleader` header); when no member has one, again until they
/// have elected one or the request timeout has passed. Members may be reached over https (a CA, and
/// a client certificate for members that ask for one), and a user authenticated
/// (`EtcdCredentials`).
public final class EtcdClient: Sendable {
    public let endpoints: [String]
    private let http: HTTPClient
    /// The member that answered last, asked first.
    private let preferred = Mutex(0)
    /// How long one member may take to answer a request.
    let requestTimeout: TimeAmount
    /// The user requests are made as, where one is given.
    private let authentication: EtcdAuthentication?

    /// `endpoints`: `http://HOST:PORT` of the cluster's members.
    public convenience init(endpoints: [String], requestTimeout: Duration = .seconds(3)) {
        self.init(
            endpoints: endpoints, http: EtcdClient.sharedHTTP, authentication: nil, requestTimeout: requestTimeout)
    }

    /// `endpoints`: `http://HOST:PORT` or `https://HOST:PORT` of the cluster's members, reached
    /// with `credentials`, whose files are read and checked here.
    public convenience init(
        endpoints: [String], credentials: EtcdCredentials, requestTimeout: Duration = .seconds(3)
    ) throws(EtcdError) {
        let http = try credentials.usesTLS ? EtcdClient.http(for: credentials) : EtcdClient.sharedHTTP
        let authentication = credentials.user.map { EtcdAuthentication(user: $0, password: credentials.password ?? "") }
        self.init(endpoints: endpoints, http: http, authentication: authentication, requestTimeout: requestTimeout)
    }

    private init(
        endpoints: [String], http: HTTPClient, authentication: EtcdAuthentication?, requestTimeout: Duration
    ) {
        precondition(!endpoints.isEmpty, "an etcd client needs at least one endpoint")
        self.endpoints = endpoints.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.http = http
        self.authentication = authentication
        self.requestTimeout = .nanoseconds(
            Int64(requestTimeout.components.seconds) * 1_000_000_000
                + requestTimeout.components.attoseconds / 1_000_000_000)
    }

    /// How many tokens this client has asked etcd for.
    var authentications: Int { authentication?.authentications ?? 0 }

    /// The HTTP client of every etcd client in the process, never shut down (as
    /// `HTTPClient.shared`), but made for a cluster: a member that refuses or does not answer a
    /// connection within a second is given up at once and the next one tried, where
    /// `HTTPClient.shared` tries the same member again until the request's deadline (a watch
    /// has none: it stayed with a dead member for good).
    private static let sharedHTTP = HTTPClient(
        eventLoopGroupProvider: .singleton, configuration: clusterConfiguration(tls: nil))

    /// The HTTP clients of https members, one for each set of files, made once and never shut
    /// down either (a process joins one cluster; a test makes a few).
    private static let tlsHTTP = Mutex<[[String?]: HTTPClient]>([:])

    private static func http(for credentials: EtcdCredentials) throws(EtcdError) -> HTTPClient {
        let files = [credentials.certificateAuthority, credentials.certificate, credentials.privateKey]
        if let made = tlsHTTP.withLock({ $0[files] }) { return made }
        let tls = try credentials.tlsConfiguration()
        return tlsHTTP.withLock { clients in
            if let made = clients[files] { return made }
            let made = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clusterConfiguration(tls: tls))
            clients[files] = made
            return made
        }
    }

    private static func clusterConfiguration(tls: TLSConfiguration?) -> HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.timeout.connect = .seconds(1)
        configuration.connectionPool.retryConnectionEstablishment = false
        // Each host follows several prefixes with a watch apiece, each holding a connection for
        // good (HTTP/1.1): the default of 8 per member left requests waiting for a connection.
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        // https as http (notes/etcd-gateway.md): ALPN would otherwise choose HTTP/2.
        configuration.httpVersion = .http1Only
        if let tls { configuration.tlsConfiguration = tls }
        return configuration
    }

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
        let token = try await currentToken()
        var lastError = "no member answered"
        for endpoint in orderedEndpoints() {
            let request = Self.request(endpoint + "/v3/watch", encoded, token: token)
            let response: HTTPClientResponse
            do {
                // No deadline: the stream lasts (the client's connect and read timeouts apply).
                response = try await http.execute(request, deadline: .distantFuture)
            } catch {
                lastError = "\(endpoint): \(Self.describe(error))"
                continue
            }
            guard response.status == .ok else {
                let text = String(buffer: (try? await response.body.collect(upTo: 1 << 20)) ?? ByteBuffer())
                if let token, Self.refusesToken(code: Int(response.status.code), text) {
                    authentication?.refused(token)
                }
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
                        // A token is checked as a watch is made: one that expired is asked for
                        // anew by the caller's next watch, which resumes where this one was.
                        let reason = result.cancel_reason ?? ""
                        if let token, Self.refusesToken(code: 0, reason) {
                            authentication?.refused(token)
                        }
                        throw EtcdError.unavailable("the watch was canceled" + (reason.isEmpty ? "" : ": \(reason)"))
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

    /// Sends `body` to `path` on the preferred member, then the others in turn, with the user's
    /// token where there is one; a token refused (expired) is asked for again, once.
    private func call<Request: Encodable, Response: Decodable>(
        _ path: String, _ body: Request
    ) async throws(EtcdError) -> Response {
        let encoded: Data
        do { encoded = try JSONEncoder().encode(body) } catch { throw .malformed("\(error)") }
        let token = try await currentToken()
        do throws(EtcdError) {
            return try await send(path, encoded, token: token)
        } catch .refused(let code, let message) {
            // The token expired (or the users changed): once more, with a new one.
            guard let token, Self.refusesToken(code: code, message) else {
                throw .refused(code: code, message: message)
            }
            authentication?.refused(token)
            let renewed = try await currentToken()
            return try await send(path, encoded, token: renewed)
        }
    }

    /// One pass over the members (`attempt`), again while a member answered that it has no
    /// leader: its cluster is electing one, which takes about an election timeout, and a
    /// request refused so was not proposed, so it may be sent again. Up to the request timeout
    /// in all, as a member's own wait for an answer would be.
    private func send<Response: Decodable>(
        _ path: String, _ encoded: Data, token: String?
    ) async throws(EtcdError) -> Response {
        let patience = ContinuousClock.now + .nanoseconds(requestTimeout.nanoseconds)
        var pause = Duration.milliseconds(50)
        while true {
            let pass: Pass<Response> = try await attempt(path, encoded, token: token)
            switch pass {
            case .answered(let response): return response
            case .failed(let lastError, let electing):
                guard electing, ContinuousClock.now + pause < patience, !Task.isCancelled else {
                    throw .unavailable(lastError)
                }
                try? await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(400))
            }
        }
    }

    private enum Pass<Response> {
        case answered(Response)
        /// No member answered: the last failure, and whether one said it has no leader.
        case failed(String, electing: Bool)
    }

    private func attempt<Response: Decodable>(
        _ path: String, _ encoded: Data, token: String?
    ) async throws(EtcdError) -> Pass<Response> {
        var lastError = "no member answered"
        var electing = false
        let first = preferred.withLock { $0 }
        for (index, endpoint) in orderedEndpoints(from: first).enumerated() {
            let request = Self.request(endpoint + path, encoded, token: token)
            let bytes: ByteBuffer
            let status: HTTPResponseStatus
            do {
                let response = try await http.execute(request, timeout: requestTimeout)
                status = response.status
                bytes = try await response.body.collect(upTo: 8 << 20)
            } catch {
                lastError = "\(endpoint): \(Self.describe(error))"
                continue
            }
            let data = Data(bytes.readableBytesView)
            if status == .ok {
                let answered = (first + index) % endpoints.count
                preferred.withLock { $0 = answered }
                do { return .answered(try JSONDecoder().decode(Response.self, from: data)) } catch {
                    throw .malformed("\(path): \(String(decoding: data, as: UTF8.self))")
                }
            }
            let failure = try? JSONDecoder().decode(EtcdErrorBody.self, from: data)
            let message = failure?.error ?? failure?.message ?? String(decoding: data, as: UTF8.self)
            let code = failure?.code ?? Int(status.code)
            // Refused by every member alike: the caller asks for another token.
            if token != nil, Self.refusesToken(code: code, message) {
                throw .refused(code: code, message: message)
            }
            if let refusal = Self.refusal(of: message) { throw refusal }
            // Authentication on, and this client names no user: etcd answers that it may not.
            if authentication == nil, message.contains("permission denied") {
                throw .credentials(
                    "etcd has authentication enabled: this host needs a user and its password (\(message))")
            }
            // Unavailable (no leader, timed out) or unknown: another member may serve it.
            if status == .serviceUnavailable || failure?.code == 14 || failure?.code == 2 {
                if Self.saysNoLeader(message) { electing = true }
                lastError = "\(endpoint): \(message)"
                continue
            }
            throw .refused(code: code, message: message)
        }
        return .failed(lastError, electing: electing)
    }

    /// A member's answer that it has no leader now (the gateway's `hasleader` header asked it
    /// to say so rather than wait): the request was not proposed.
    static func saysNoLeader(_ message: String) -> Bool {
        message.contains("no leader")
    }

    private static func request(_ url: String, _ encoded: Data, token: String?) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Grpc-Metadata-hasleader", value: "true")
        if let token, !token.isEmpty { request.headers.add(name: "Authorization", value: token) }
        request.body = .bytes(ByteBuffer(bytes: encoded))
        return request
    }

    // MARK: Authentication

    /// The token requests carry: nil without a user, "" where etcd has authentication off.
    private func currentToken() async throws(EtcdError) -> String? {
        guard let authentication else { return nil }
        return try await authentication.token { [self] user, password in try await self.authenticate(user, password) }
    }

    private struct EtcdAuthenticateRequest: Encodable { var name: String, password: String }
    private struct EtcdAuthenticateResponse: Decodable { var token: String? }

    /// A new token for `user`.
    private func authenticate(_ user: String, _ password: String) async throws(EtcdError) -> String {
        let encoded: Data
        do { encoded = try JSONEncoder().encode(EtcdAuthenticateRequest(name: user, password: password)) } catch {
            throw .malformed("\(error)")
        }
        do throws(EtcdError) {
            let response: EtcdAuthenticateResponse = try await send("/v3/auth/authenticate", encoded, token: nil)
            guard let token = response.token, !token.isEmpty else {
                throw EtcdError.malformed("an authentication without a token")
            }
            return token
        } catch .refused(_, let message) where message.contains("authentication is not enabled") {
            return ""  // as etcd's own client: requests go without a token
        } catch .refused(_, let message) where message.contains("authentication failed") {
            throw .credentials("etcd refused the user '\(user)': a wrong password, or no such user (\(message))")
        } catch .refused(_, let message) {
            throw .credentials("etcd refused to authenticate the user '\(user)' (\(message))")
        }
    }

    /// Whether a member refused the token a request of a client with a user carried (expired,
    /// or issued before a change of the users), not the request: etcd 3.4 says `invalid auth
    /// token` (gRPC code 16, HTTP 401) or, for a request met by a change of the users, `auth:
    /// revision in header is old` (code 2); later releases, `revision of auth store is old`; and
    /// `user name is empty` to no token at all, where authentication was enabled after this
    /// client found it off.
    static func refusesToken(code: Int, _ message: String) -> Bool {
        code == 16 || code == 401 || message.contains("invalid auth token")
            || message.contains("revision in header is old") || message.contains("revision of auth store is old")
            || message.contains("user name is empty")
    }

    /// A refusal of this client's credentials, said as such.
    static func refusal(of message: String) -> EtcdError? {
        if message.contains("user name is empty") {
            return .credentials("etcd has authentication enabled: this host needs a user and its password (\(message))")
        }
        // etcd 3.4 and later, with --client-cert-auth and authentication enabled, refuse through
        // the gateway any client certificate that names a Common Name (it would not be the user).
        if message.contains("CommonName of client") {
            return .credentials(
                "etcd refuses a client certificate that has a Common Name (CN) while authentication is enabled: "
                    + "give this host a certificate whose subject has no CN, such as /O=coordfs (\(message))")
        }
        return nil
    }

    /// A failure to reach a member, said plainly where it is TLS's.
    static func describe(_ error: Error) -> String {
        if case .handshakeFailed(let why)? = error as? NIOSSLError {
            return "the TLS handshake failed (\(why)): is the member's certificate signed by the CA trusted here, "
                + "for the name or address in its URL, and does the member take this host's certificate?"
        }
        if error is NIOSSLError || error is NIOSSLExtraError { return "TLS failed: \(error)" }
        return "\(error)"
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
