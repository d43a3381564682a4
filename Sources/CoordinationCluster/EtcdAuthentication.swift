import Synchronization

/// A client's user in etcd (`etcdctl auth enable`): the token `/v3/auth/authenticate` gives for
/// its name and password, which every request carries as its `Authorization` header, asked for
/// again once a member refuses it (`invalid auth token`: a simple token left unused for etcd's
/// `--auth-token-ttl`, a JWT past its lifetime, a password changed). Requests that need a token
/// at the same moment wait for one authentication between them; a user etcd refused is not
/// tried again for a few seconds, so that hosts with a stale password do not keep etcd hashing it.
final class EtcdAuthentication: Sendable {
    let user: String
    private let password: String
    private let state = Mutex(State())
    /// How long a failed authentication is answered as it was before it is tried again.
    static let quiet = Duration.seconds(5)

    private struct State {
        /// The token requests carry ("" where etcd has authentication off); nil: none yet, or
        /// the last one was refused.
        var token: String?
        /// The authentication under way.
        var asking: Task<Result<String, EtcdError>, Never>?
        /// The last refusal of the user, answered again until then.
        var failed: (error: EtcdError, until: ContinuousClock.Instant)?
        var authentications = 0
    }

    private enum Next {
        case held(String)
        case failed(EtcdError)
        case waiting(Task<Result<String, EtcdError>, Never>)
    }

    init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// How many tokens were asked for.
    var authentications: Int { state.withLock { $0.authentications } }

    /// The token to send: the one held, else a new one `authenticate` asks etcd for (with the
    /// user and the password).
    func token(
        _ authenticate: @escaping @Sendable (_ user: String, _ password: String) async throws -> String
    ) async throws(EtcdError) -> String {
        let next = state.withLock { state -> Next in
            if let token = state.token { return .held(token) }
            if let asking = state.asking { return .waiting(asking) }
            if let failed = state.failed, ContinuousClock.now < failed.until { return .failed(failed.error) }
            let (user, password) = (self.user, self.password)
            let asking = Task { () -> Result<String, EtcdError> in
                do { return .success(try await authenticate(user, password)) } catch let error as EtcdError {
                    return .failure(error)
                } catch {
                    return .failure(.malformed("\(error)"))
                }
            }
            state.asking = asking
            state.authentications += 1
            return .waiting(asking)
        }
        let asking: Task<Result<String, EtcdError>, Never>
        switch next {
        case .held(let token): return token
        case .failed(let error): throw error
        case .waiting(let task): asking = task
        }
        let result = await asking.value
        state.withLock { state in
            guard state.asking == asking else { return }
            state.asking = nil
            switch result {
            case .success(let token): state.token = token
            // A refusal of the user waits out the quiet time; etcd out of reach does not.
            case .failure(let error):
                guard case .credentials = error else { return }
                state.failed = (error: error, until: ContinuousClock.now + Self.quiet)
            }
        }
        switch result {
        case .success(let token): return token
        case .failure(let error): throw error
        }
    }

    /// A member refused `token`: the next request asks for a new one (unless one was already).
    func refused(_ token: String) {
        state.withLock { state in
            if state.token == token { state.token = nil }
        }
    }
}
