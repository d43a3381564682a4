import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// etcd members on loopback for a test, each with its own data directory and ports, stopped
/// (killed, their directories removed) by `stop`, which the tests call in a `defer`.
final class EtcdServers: @unchecked Sendable {
    static let program = "/usr/bin/etcd"
    static let control = "/usr/bin/etcdctl"
    static var installed: Bool { FileManager.default.isExecutableFile(atPath: program) }

    let directory: URL
    private(set) var members: [Process?]
    let clientURLs: [String]
    private let arguments: [[String]]
    /// The certificates of members reached over https, which ask hosts for theirs.
    private let tls: EtcdCertificates?

    /// Starts `count` members as one cluster and waits until it has a leader. With `tls`, the
    /// members serve https with its `member` certificate and take only clients with a
    /// certificate of its CA (the `host` one); `authTokenTTL`: seconds an unused token lasts.
    init(count: Int = 1, tls: EtcdCertificates? = nil, authTokenTTL: Int? = nil) throws {
        // A test that needs etcd fails without it; the suites that may pass over it say so.
        guard Self.installed else { throw Failure("etcd is not installed (make setup installs etcd-server)") }
        self.tls = tls
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-etcd-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let ports = try (0..<count).map { _ in (try Self.freePort(), try Self.freePort()) }
        let scheme = tls == nil ? "http" : "https"
        clientURLs = ports.map { "\(scheme)://127.0.0.1:\($0.0)" }
        let cluster = ports.enumerated().map { "m\($0.offset)=http://127.0.0.1:\($0.element.1)" }.joined(separator: ",")
        var security: [String] = []
        if let tls {
            security = [
                "--cert-file", tls.path("member.crt"), "--key-file", tls.path("member.key"), "--trusted-ca-file",
                tls.path("ca.crt"), "--client-cert-auth"
            ]
        }
        if let authTokenTTL { security += ["--auth-token-ttl", String(authTokenTTL)] }
        arguments = ports.enumerated().map { index, port in
            [
                "--name", "m\(index)", "--data-dir", "m\(index).etcd",
                "--listen-client-urls", "\(scheme)://127.0.0.1:\(port.0)", "--advertise-client-urls",
                "\(scheme)://127.0.0.1:\(port.0)",
                "--listen-peer-urls", "http://127.0.0.1:\(port.1)", "--initial-advertise-peer-urls",
                "http://127.0.0.1:\(port.1)",
                "--initial-cluster", cluster, "--initial-cluster-token", "coordfs-test", "--pre-vote",
                "--heartbeat-interval", "100", "--election-timeout", "1000", "--log-level", "warn"
            ] + security
        }
        members = Array(repeating: nil, count: count)
        do {
            for index in 0..<count { try start(index, state: "new") }
            try waitUntilHealthy()
        } catch {
            stop()
            throw error
        }
    }

    func start(_ index: Int, state: String = "existing") throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.program)
        process.arguments = arguments[index] + ["--initial-cluster-state", state]
        process.currentDirectoryURL = directory
        let log = directory.appendingPathComponent("m\(index).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        members[index] = process
    }

    /// Kills member `index`, which runs, at once (SIGKILL), as a crash would.
    func kill(_ index: Int) {
        let process = members[index]!
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        members[index] = nil
    }

    func stop() {
        for index in members.indices where members[index] != nil { kill(index) }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Until every running member says it is healthy (it has a leader), or 20 s.
    func waitUntilHealthy() throws {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let healthy = zip(members, clientURLs).allSatisfy { member, url in member == nil || health(of: url) }
            if healthy { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        let logs = (0..<members.count).map {
            (try? String(contentsOf: directory.appendingPathComponent("m\($0).log"), encoding: .utf8)) ?? ""
        }
        throw Failure("etcd did not become healthy within 20 s: \(logs.joined(separator: "\n").suffix(2000))")
    }

    private func health(of url: String) -> Bool {
        let result = try? Self.run("/usr/bin/curl", ["-s", "-m", "1"] + curlTLS + [url + "/health"])
        return result?.output.contains("\"health\":\"true\"") == true
    }

    /// curl's arguments for these members' TLS.
    private var curlTLS: [String] {
        guard let tls else { return [] }
        return ["--cacert", tls.path("ca.crt"), "--cert", tls.path("host.crt"), "--key", tls.path("host.key")]
    }

    /// Enables etcd's authentication (`etcdctl auth enable`), with a root user and `user`, who
    /// may read and write the keys under `/coordfs/` and nothing else.
    func enableAuthentication(user: String, password: String) throws {
        var common = ["--endpoints", clientURLs.joined(separator: ",")]
        if let tls {
            common += ["--cacert", tls.path("ca.crt"), "--cert", tls.path("host.crt"), "--key", tls.path("host.key")]
        }
        for command in [
            ["user", "add", "root", "--new-user-password=root password"],
            ["user", "add", user, "--new-user-password=\(password)"],
            ["role", "add", "coordfs"],
            ["role", "grant-permission", "coordfs", "--prefix=true", "readwrite", "/coordfs/"],
            ["user", "grant-role", user, "coordfs"],
            ["auth", "enable"]
        ] {
            let result = try Self.run(Self.control, common + command)
            guard result.status == 0 else {
                throw Failure("etcdctl \(command.joined(separator: " ")): \(result.output)")
            }
        }
    }

    private static func run(_ program: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["ETCDCTL_API"] = "3"
        process.environment = environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// A port nobody listens on now (the kernel's choice for a socket bound to port 0).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw Failure("bind: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
