import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A store's item names hidden from whoever reads etcd (`--cluster-key-file`): the keys name
/// each item by a keyed hash of each of its path's components, and the values that must say the
/// path (a delegation's, a presence's, news, a status answer) carry it sealed.
///
/// Components are hashed one by one (each with its directory's name) and the slashes kept, so
/// that a directory's name is the start of its items' names: its subtree is still one range of
/// keys, which a request reads and a replica follows (`DelegationKeys.neighbourhood`). A host
/// that lists the keys learns the paths from their values (the replica, status, the
/// presenters' news).
///
/// Three keys are derived from the secret with HKDF-SHA256 (the store's name as salt, so that one
/// secret names two stores' items apart), one for each use: the names (HMAC-SHA256, the first
/// `nameBytes` in hexadecimal), the values (AES-256-GCM, the value's key authenticated with it,
/// so that a value put under another key does not open), and the verifier the host record shows
/// (`HostRecord.names`), by which hosts with another secret, or none, are refused at join.
public struct HiddenNames: Sendable {
    /// A secret shorter than this is refused: it could be guessed from the names or the verifier.
    public static let minimumSecret = 32
    /// Bytes of a component's HMAC kept in its name: collisions stay out of reach.
    static let nameBytes = 16

    /// The derived keys' bytes (kept as bytes: Crypto's keys are not Sendable).
    private let naming: [UInt8]
    private let sealing: [UInt8]
    /// What the host record shows of the secret: equal for equal secrets, and no help in
    /// finding the names' or the values' keys.
    public let verifier: String

    /// `secret`: the key file's bytes (at least `minimumSecret`); `store`: the store's name.
    public init(secret: [UInt8], store: String) {
        precondition(secret.count >= Self.minimumSecret, "a cluster key of \(secret.count) bytes")
        let input = SymmetricKey(data: secret)
        let salt = Array("coordfs store \(store)".utf8)
        naming = Self.derive(input, salt, "coordfs item names")
        sealing = Self.derive(input, salt, "coordfs sealed values")
        let checking = SymmetricKey(data: Self.derive(input, salt, "coordfs key verifier"))
        let check = HMAC<SHA256>.authenticationCode(for: Array("coordfs cluster key".utf8), using: checking)
        verifier = Self.hex(Array(check).prefix(Self.nameBytes))
    }

    private static func derive(_ input: SymmetricKey, _ salt: [UInt8], _ use: String) -> [UInt8] {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: input, salt: salt, info: Array(use.utf8), outputByteCount: 32)
            .withUnsafeBytes { Array($0) }
    }

    /// `path` ("" the store's root, "a/b" an item below it) as keys name it: each component by
    /// its hash, the slashes kept. A component is hashed with the name of the directory it is
    /// in, so that one name in two directories (a `Makefile` in each) is named apart. An empty
    /// component (a path that begins with "/") stays empty: it names nothing, and keeps the
    /// path's directories those of its name.
    public func name(of path: String) -> String {
        if path.isEmpty { return path }
        let key = SymmetricKey(data: naming)
        var named = ""
        for (index, component) in path.split(separator: "/", omittingEmptySubsequences: false).enumerated() {
            if index > 0 { named += "/" }
            if component.isEmpty { continue }
            let hashed: [UInt8] = Array(named.utf8) + [0] + Array(component.utf8)
            let code = HMAC<SHA256>.authenticationCode(for: hashed, using: key)
            named += Self.hex(Array(code).prefix(Self.nameBytes))
        }
        return named
    }

    /// `plaintext` sealed as the value of `key`: a fresh nonce, the ciphertext and its tag.
    public func seal(_ plaintext: [UInt8], for key: [UInt8]) -> [UInt8] {
        do {
            let box = try AES.GCM.seal(plaintext, using: SymmetricKey(data: sealing), authenticating: key)
            // Always there with the default nonce's size.
            return Array(box.combined!)
        } catch {
            preconditionFailure("AES-GCM seals with a 256-bit key and a fresh nonce: \(error)")
        }
    }

    /// What `value` of `key` seals; nil when it was not sealed with this secret for this key
    /// (or not sealed at all).
    public func unseal(_ value: [UInt8], for key: [UInt8]) -> [UInt8]? {
        guard let box = try? AES.GCM.SealedBox(combined: value),
            let plaintext = try? AES.GCM.open(box, using: SymmetricKey(data: sealing), authenticating: key)
        else { return nil }
        return Array(plaintext)
    }

    private static let digits = Array("0123456789abcdef".utf8)

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        var text: [UInt8] = []
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

extension HiddenNames {
    /// Why a cluster key file cannot be used, naming it.
    public struct KeyFileError: Error, Equatable, CustomStringConvertible {
        public let description: String
        init(_ path: String, _ why: String) { description = "the cluster key file '\(path)' \(why)" }
    }

    /// The secret of the key file at `path`: its bytes, all of them (a newline at the end too:
    /// every host has a copy of the same file). Refused when it is not a regular file, when its
    /// group or anyone else may read it, or when it holds fewer than `minimumSecret` bytes.
    public static func secret(inFile path: String) throws(KeyFileError) -> [UInt8] {
        var status = stat()
        guard stat(path, &status) == 0 else {
            let exists = FileManager.default.fileExists(atPath: path)
            throw KeyFileError(path, exists ? "cannot be read by this user" : "does not exist")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else { throw KeyFileError(path, "is not a regular file") }
        guard status.st_mode & 0o044 == 0 else {
            throw KeyFileError(
                path,
                "may be read by other users (mode 0\(String(status.st_mode & 0o777, radix: 8))): "
                    + "a secret is readable by its owner alone (chmod 600)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyFileError(path, "cannot be read by this user")
        }
        guard data.count >= minimumSecret else {
            throw KeyFileError(
                path,
                "holds \(data.count) bytes, and a cluster key at least \(minimumSecret) "
                    + "(head -c 32 /dev/urandom >FILE)")
        }
        return Array(data)
    }
}
