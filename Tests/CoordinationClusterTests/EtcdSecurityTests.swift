@testable import CoordinationCluster
import Foundation
import Testing

/// A member reached over https that asks hosts for a client certificate, with etcd's
/// authentication enabled: a host joins with its certificate, user and password; a wrong
/// password, a CA that did not sign the member's certificate, a host without a user, and files
/// that are no certificate or key are refused at once, saying which; a token that expired is
/// asked for again. The tests start etcd and make their certificates with openssl themselves,
/// and fail (they are not skipped) where either is missing.
@Suite(.serialized)
struct EtcdSecurityTests {
    static let user = "coordfs"
    static let password = "a password, with spaces"

    /// Runs `body` with one member that serves https, takes only hosts with a certificate of
    /// its CA, and authenticates `user`; stops it and removes the certificates after, even when
    /// `body` fails.
    static func withSecureMember(
        authTokenTTL: Int? = nil, _ body: (EtcdServers, EtcdCertificates) async throws -> Void
    ) async throws {
        let certificates = try EtcdCertificates()
        defer { certificates.remove() }
        let servers = try EtcdServers(tls: certificates, authTokenTTL: authTokenTTL)
        defer { servers.stop() }
        try servers.enableAuthentication(user: Self.user, password: Self.password)
        try await body(servers, certificates)
    }

    /// The host's credentials: its certificate and key, `user` with `password`, trusting `ca`.
    static func credentials(
        _ certificates: EtcdCertificates, password: String? = EtcdSecurityTests.password, ca: String = "ca.crt"
    ) -> EtcdCredentials {
        EtcdCredentials(
            certificateAuthority: certificates.path(ca), certificate: certificates.path("host.crt"),
            privateKey: certificates.path("host.key"), user: password == nil ? nil : Self.user, password: password)
    }

    @Test func aHostJoinsWithItsCertificateUserAndPassword() async throws {
        try await Self.withSecureMember { servers, certificates in
            let client = try EtcdClient(endpoints: servers.clientURLs, credentials: Self.credentials(certificates))
            let member = try await ClusterMemberTests.member("A", client)
            try await member.acquire("projects/film/scene.blend", .write)
            #expect(ClusterMemberTests.keys(member) == ["A w projects"])
            #expect(client.authentications == 1, "one token for every request and watch of the host")
            await member.leave()
            // The keys are the user's: a host with a certificate but no user reads none.
            let anonymous = try EtcdClient(
                endpoints: servers.clientURLs, credentials: Self.credentials(certificates, password: nil))
            do throws(EtcdError) {
                _ = try await anonymous.get(Array("/coordfs/".utf8), prefix: true)
                Issue.record("a host without a user read the store's keys")
            } catch {
                #expect(error.description.hasPrefix("etcd has authentication enabled"), "\(error)")
            }
        }
    }

    @Test func aWrongPasswordIsRefusedAtOnceNamingTheUser() async throws {
        try await Self.withSecureMember { servers, certificates in
            let client = try EtcdClient(
                endpoints: servers.clientURLs, credentials: Self.credentials(certificates, password: "not it"))
            let started = ContinuousClock.now
            do throws(EtcdError) {
                _ = try await HostLease.grant(on: client, ttl: 5)
                Issue.record("a lease was granted with a wrong password")
            } catch {
                guard case .credentials(let why) = error else {
                    Issue.record("not a refusal of the credentials: \(error)")
                    return
                }
                #expect(why.hasPrefix("etcd refused the user 'coordfs': a wrong password, or no such user"), "\(why)")
            }
            #expect(ContinuousClock.now - started < .seconds(2), "refused, not retried")
            // Within the quiet time, requests get the same answer without asking etcd again.
            do throws(EtcdError) {
                try await client.put(Array("/coordfs/x".utf8), [1])
                Issue.record("a key was put with a wrong password")
            } catch {
                #expect(error.description.hasPrefix("etcd refused the user 'coordfs'"), "\(error)")
            }
            #expect(client.authentications == 1)
        }
    }

    @Test func aMemberWhoseCertificateTheHostDoesNotTrustIsRefusedAtTheHandshake() async throws {
        try await Self.withSecureMember { servers, certificates in
            try certificates.makeCA("other")
            let client = try EtcdClient(
                endpoints: servers.clientURLs, credentials: Self.credentials(certificates, ca: "other.crt"))
            do throws(EtcdError) {
                _ = try await HostLease.grant(on: client, ttl: 5)
                Issue.record("a lease was granted by a member this host does not trust")
            } catch {
                guard case .unavailable(let why) = error else {
                    Issue.record("not a failure to reach the member: \(error)")
                    return
                }
                #expect(why.contains("TLS"), "\(why)")
            }
        }
    }

    @Test func aTokenThatExpiredIsAskedForAgainByRequestsAndWatches() async throws {
        try await Self.withSecureMember(authTokenTTL: 1) { servers, certificates in
            let client = try EtcdClient(endpoints: servers.clientURLs, credentials: Self.credentials(certificates))
            let key = Array("/coordfs/s/x".utf8)
            try await client.put(key, [1])
            #expect(client.authentications == 1)
            // Unused for longer than its TTL, etcd forgets the token.
            try await Task.sleep(for: .milliseconds(2500))
            try await client.put(key, [2])
            #expect(client.authentications == 2, "the request was refused, and made again with a new token")
            // A watch is refused as it is made; the next asks for a new token.
            try await Task.sleep(for: .milliseconds(2500))
            var refused = client.watch(prefix: key, from: nil).makeAsyncIterator()
            do {
                _ = try await refused.next()
                Issue.record("a watch with an expired token was made")
            } catch {
                #expect("\(error)".contains("invalid auth token"), "\(error)")
            }
            let revision = try await client.put(key, [3])
            #expect(client.authentications == 3)
            var watch = client.watch(prefix: key, from: revision).makeAsyncIterator()
            let batch = try await watch.next()
            #expect(batch?.events.map(\.keyValue.value) == [[3]])
        }
    }

    /// What is wrong with a file is said as the client is made, naming the file.
    @Test func aFileThatIsNoCertificateOrKeyIsNamed() throws {
        let certificates = try EtcdCertificates()
        defer { certificates.remove() }
        try certificates.encryptKey("host")
        func refusal(_ credentials: EtcdCredentials) -> String {
            do throws(EtcdError) {
                try credentials.check()
                return "accepted"
            } catch {
                guard case .credentials(let why) = error else { return "\(error)" }
                return why
            }
        }
        let ca = certificates.path("ca.crt"), host = certificates.path("host.crt"), key = certificates.path("host.key")
        #expect(refusal(EtcdCredentials(certificateAuthority: ca, certificate: host, privateKey: key)) == "accepted")
        let missing = certificates.path("nothing.crt")
        #expect(
            refusal(EtcdCredentials(certificateAuthority: missing))
                == "the CA certificate file '\(missing)' does not exist")
        #expect(
            refusal(EtcdCredentials(certificateAuthority: key))
                == "the CA certificate file '\(key)' holds no PEM certificate")
        #expect(
            refusal(EtcdCredentials(certificateAuthority: ca, certificate: host))
                == "a client certificate goes with its private key: give both, or neither")
        let other = certificates.path("member.key")
        #expect(
            refusal(EtcdCredentials(certificateAuthority: ca, certificate: host, privateKey: other)).hasPrefix(
                "the private key '\(other)' is not the key of the certificate '\(host)'"))
        let encrypted = certificates.path("host-encrypted.key")
        #expect(
            refusal(EtcdCredentials(certificateAuthority: ca, certificate: host, privateKey: encrypted)).hasPrefix(
                "the private key file '\(encrypted)' is encrypted"))
        // A client is not made of them.
        #expect(throws: EtcdError.self) {
            _ = try EtcdClient(
                endpoints: ["https://127.0.0.1:1"], credentials: EtcdCredentials(certificateAuthority: key))
        }
    }

    /// Which refusals of a request are of its token (asked for again), as etcd words them.
    @Test func aRefusedTokenIsToldFromARefusedRequest() {
        #expect(EtcdClient.refusesToken(code: 16, "etcdserver: invalid auth token"))
        #expect(EtcdClient.refusesToken(code: 2, "auth: revision in header is old"))
        #expect(
            EtcdClient.refusesToken(code: 0, "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"))
        #expect(!EtcdClient.refusesToken(code: 7, "etcdserver: permission denied"))
        #expect(!EtcdClient.refusesToken(code: 5, "etcdserver: requested lease not found"))
        #expect(!EtcdClient.refusesToken(code: 14, "etcdserver: no leader"))
    }
}
