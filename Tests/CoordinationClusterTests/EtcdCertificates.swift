import Foundation

/// A throwaway CA and the certificates a test's etcd members and hosts show, made with openssl
/// in a directory of their own (`remove` deletes it): `ca.crt`, `member.crt` (for 127.0.0.1 and
/// localhost, for server and client use: etcd's gateway shows it to etcd itself) and `host.crt`
/// (a host's, without a Common Name, as etcd's gateway wants with authentication on), each with
/// its `.key`.
struct EtcdCertificates {
    static let openssl = "/usr/bin/openssl"
    let directory: URL

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.openssl) else {
            throw EtcdServers.Failure("openssl is not installed: the TLS tests make their certificates with it")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-certificates-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        do {
            try makeCA("ca")
            try makeCertificate(
                "member", signedBy: "ca", subject: "/CN=etcd member",
                extensions: ["subjectAltName=IP:127.0.0.1,DNS:localhost", "extendedKeyUsage=serverAuth,clientAuth"])
            try makeCertificate(
                "host", signedBy: "ca", subject: "/O=coordfs", extensions: ["extendedKeyUsage=clientAuth"])
        } catch {
            remove()
            throw error
        }
    }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    /// A CA of its own: `NAME.crt`, `NAME.key`.
    func makeCA(_ name: String) throws {
        try makeKey(name)
        try run([
            "req", "-x509", "-new", "-key", path("\(name).key"), "-subj", "/CN=coordfs test CA \(name)", "-days", "1",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-out", path("\(name).crt")
        ])
    }

    /// `NAME.crt` for `subject`, signed by the CA `ca`, with `extensions` (openssl's lines), and
    /// its `NAME.key`.
    func makeCertificate(_ name: String, signedBy ca: String, subject: String, extensions: [String]) throws {
        try makeKey(name)
        try run(["req", "-new", "-key", path("\(name).key"), "-subj", subject, "-out", path("\(name).csr")])
        try Data((extensions.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path("\(name).ext")))
        try run([
            "x509", "-req", "-in", path("\(name).csr"), "-CA", path("\(ca).crt"), "-CAkey", path("\(ca).key"),
            "-set_serial", "0x" + String(UInt64.random(in: 1...UInt64.max), radix: 16), "-days", "1",
            "-extfile", path("\(name).ext"), "-out", path("\(name).crt")
        ])
    }

    /// `NAME.key` encrypted with a passphrase as `NAME-encrypted.key`.
    func encryptKey(_ name: String) throws {
        try run([
            "pkey", "-in", path("\(name).key"), "-aes-128-cbc", "-passout", "pass:secret",
            "-out", path("\(name)-encrypted.key")
        ])
    }

    private func makeKey(_ name: String) throws {
        try run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path("\(name).key")])
    }

    private func run(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.openssl)
        process.arguments = arguments
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let said = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw EtcdServers.Failure("openssl \(arguments.first ?? ""): \(String(decoding: said, as: UTF8.self))")
        }
    }
}
