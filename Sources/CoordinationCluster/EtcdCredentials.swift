import Foundation
import NIOSSL

/// What a host shows etcd, and what it trusts of it: the CA that signed the members'
/// certificates (https members), this host's certificate and key (members run with
/// `--client-cert-auth`), and a user and password (`etcdctl auth enable`). The files are read
/// once, when a client is made: what is wrong with one is said then, naming it.
public struct EtcdCredentials: Sendable, Equatable {
    /// A PEM file of the CA certificates the members' certificates must be signed by (nil: the
    /// system's).
    public var certificateAuthority: String?
    /// This host's certificate (PEM, its chain after it) and its private key (PEM, unencrypted).
    public var certificate: String?
    public var privateKey: String?
    /// The etcd user to authenticate as, and its password.
    public var user: String?
    public var password: String?

    public init(
        certificateAuthority: String? = nil, certificate: String? = nil, privateKey: String? = nil,
        user: String? = nil, password: String? = nil
    ) {
        self.certificateAuthority = certificateAuthority
        self.certificate = certificate
        self.privateKey = privateKey
        self.user = user
        self.password = password
    }

    /// Whether the members are reached through TLS of these files.
    public var usesTLS: Bool { certificateAuthority != nil || certificate != nil || privateKey != nil }

    /// Reads and checks the TLS files, as a client made with them would.
    public func check() throws(EtcdError) {
        if usesTLS { _ = try tlsConfiguration() }
    }

    /// The TLS a client of these files speaks: each file read and checked, and the key matched
    /// with the certificate.
    func tlsConfiguration() throws(EtcdError) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let path = certificateAuthority {
            let roots = try Self.certificates(in: path, "CA certificate")
            tls.trustRoots = .certificates(roots)
        }
        switch (certificate, privateKey) {
        case (nil, nil): break
        case (let certificate?, let key?):
            let chain = try Self.certificates(in: certificate, "certificate")
            tls.certificateChain = chain.map { NIOSSLCertificateSource.certificate($0) }
            let loaded = try Self.key(in: key)
            tls.privateKey = .privateKey(loaded)
        default:
            throw .credentials("a client certificate goes with its private key: give both, or neither")
        }
        // BoringSSL matches the key with the certificate as a context takes them: a pair that
        // does not go together is said here, not at each connection.
        do { _ = try NIOSSLContext(configuration: tls) } catch {
            if let certificate, let privateKey {
                throw .credentials(
                    "the private key '\(privateKey)' is not the key of the certificate '\(certificate)' (\(error))")
            }
            throw .credentials("the TLS settings cannot be used: \(error)")
        }
        return tls
    }

    private static func contents(of path: String, _ what: String) throws(EtcdError) -> [UInt8] {
        let files = FileManager.default
        guard files.fileExists(atPath: path) else { throw .credentials("the \(what) file '\(path)' does not exist") }
        guard files.isReadableFile(atPath: path), let data = files.contents(atPath: path) else {
            throw .credentials("the \(what) file '\(path)' cannot be read by this user")
        }
        return Array(data)
    }

    private static func certificates(in path: String, _ what: String) throws(EtcdError) -> [NIOSSLCertificate] {
        let bytes = try contents(of: path, what)
        do {
            let certificates = try NIOSSLCertificate.fromPEMBytes(bytes)
            if !certificates.isEmpty { return certificates }
        } catch {}
        throw .credentials("the \(what) file '\(path)' holds no PEM certificate")
    }

    private static func key(in path: String) throws(EtcdError) -> NIOSSLPrivateKey {
        let bytes = try contents(of: path, "private key")
        // BoringSSL would ask for the passphrase of an encrypted key on the terminal: a daemon
        // has none.
        if String(decoding: bytes, as: UTF8.self).contains("ENCRYPTED") {
            throw .credentials(
                "the private key file '\(path)' is encrypted: coordfs takes it unencrypted (readable by its user only)")
        }
        do { return try NIOSSLPrivateKey(bytes: bytes, format: .pem) } catch {
            throw .credentials("the private key file '\(path)' holds no PEM private key")
        }
    }
}
