@testable import CoordFSCommands
import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The options of a host of a shared store as `coordfs mount` and `coordfs daemon` take them,
/// and a profile's keys: https members with the TLS options, the etcd user, and where its
/// password comes from (a file, or the environment; never the command line).
@Suite struct ClusterOptionsTests {
    static let cluster = [
        "--cluster", "etcd://10.0.0.1:2379,10.0.0.2:2379", "--cluster-store", "projects", "--host-name", "render-3"
    ]

    /// Runs `body` in a directory of its own, removed after.
    static func inDirectory(_ body: (URL) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-cluster-options-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try body(directory)
    }

    /// The setting of `cluster` and `arguments`, or why there is none.
    static func setting(
        _ arguments: [String], environment: [String: String] = [:]
    ) -> Result<ClusterSetting?, CommandFailure> {
        do {
            return .success(try ClusterOptions.parse(cluster + arguments).setting(environment: environment))
        } catch let failure as CommandFailure {
            return .failure(failure)
        } catch {
            return .failure(CommandFailure("\(error)"))
        }
    }

    static func refusal(_ arguments: [String], environment: [String: String] = [:]) -> String {
        switch setting(arguments, environment: environment) {
        case .success: "accepted"
        case .failure(let failure): failure.description
        }
    }

    @Test func theMembersAreReachedOverHttpsWithTheTLSOptions() throws {
        #expect(try ClusterJoin.endpoints("etcd://a:1,b:2") == ["http://a:1", "http://b:2"])
        #expect(try ClusterJoin.endpoints("etcd://a:1,b:2", secure: true) == ["https://a:1", "https://b:2"])
        #expect(try ClusterJoin.endpoints("https://a:1,http://b:2") == ["https://a:1", "http://b:2"])
        #expect(try ClusterJoin.endpoints("https://a:1", secure: true) == ["https://a:1"])
        #expect(throws: CommandFailure.self) { try ClusterJoin.endpoints("http://a:1", secure: true) }
    }

    @Test func thePasswordComesFromItsFileOrTheEnvironment() throws {
        try Self.inDirectory { directory in
            let file = directory.appendingPathComponent("password").path
            try Data("a secret\r\nnot this line\n".utf8).write(to: URL(fileURLWithPath: file))
            let fromFile = try #require(
                try Self.setting(["--etcd-user", "coordfs", "--etcd-password-file", file]).get())
            #expect(fromFile.etcdUser == "coordfs" && fromFile.etcdPassword == "a secret")
            #expect(fromFile.endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"], "no TLS option: http")
            let environment = [ClusterOptions.passwordVariable: "from the environment"]
            let fromEnvironment = try #require(
                try Self.setting(["--etcd-user", "coordfs"], environment: environment).get())
            #expect(fromEnvironment.etcdPassword == "from the environment")
            // The file comes first.
            let both = try #require(
                try Self.setting(["--etcd-user", "u", "--etcd-password-file", file], environment: environment).get())
            #expect(both.etcdPassword == "a secret")
            let none = try #require(try Self.setting([]).get())
            #expect(none.etcdUser == nil && none.etcdPassword == nil && none.etcdCA == nil)
        }
    }

    @Test func aMissingPasswordOrFileIsRefusedNamingIt() throws {
        #expect(
            Self.refusal(["--etcd-user", "coordfs"])
                == "--etcd-user coordfs needs its password: --etcd-password-file FILE, or COORDFS_ETCD_PASSWORD in "
                + "the environment (never the command line)")
        #expect(throws: (any Error).self) { _ = try ClusterOptions.parse(Self.cluster + ["--etcd-password", "x"]) }
        try Self.inDirectory { directory in
            let file = directory.appendingPathComponent("password").path
            #expect(
                Self.refusal(["--etcd-user", "coordfs", "--etcd-password-file", file])
                    == "cannot read the etcd password file '\(file)': it does not exist")
            try Data("\n".utf8).write(to: URL(fileURLWithPath: file))
            #expect(
                Self.refusal(["--etcd-user", "coordfs", "--etcd-password-file", file])
                    == "the etcd password file '\(file)' is empty: its first line is the password")
            #expect(Self.refusal(["--etcd-password-file", file]).hasPrefix("--etcd-password-file is the password of"))
            let missing = directory.appendingPathComponent("ca.crt").path
            #expect(
                Self.refusal(["--etcd-cacert", missing]) == "the CA certificate file '\(missing)' does not exist")
            #expect(
                Self.refusal(["--etcd-cert", missing])
                    == "--etcd-cert and --etcd-key go together: this host's certificate and its private key")
        }
    }

    @Test func aProfileNamesThePasswordsFileNotThePassword() throws {
        try Self.inDirectory { directory in
            try Data("from the profile\n".utf8).write(to: directory.appendingPathComponent("password"))
            let url = directory.appendingPathComponent("shared.profile")
            try Data(
                """
                cluster = etcd://10.0.0.1:2379
                cluster-store = projects
                etcd-user = coordfs
                etcd-password-file = password   # beside the profile

                """.utf8
            ).write(to: url)
            let profile = try Profile(contentsOf: url)
            #expect(profile.etcdPasswordFile == directory.appendingPathComponent("password").standardizedFileURL.path)
            let setting = try #require(try ClusterOptions.parse([]).setting(over: profile, environment: [:]))
            #expect(setting.etcdUser == "coordfs" && setting.etcdPassword == "from the profile")
            // The command line's user goes over the profile's.
            let other = try #require(
                try ClusterOptions.parse(["--etcd-user", "other"]).setting(over: profile, environment: [:]))
            #expect(other.etcdUser == "other" && other.etcdPassword == "from the profile")
            try Data("cluster = etcd://10.0.0.1:2379\netcd-password = secret\n".utf8).write(to: url)
            #expect(throws: ProfileError.self) { _ = try Profile(contentsOf: url) }
        }
    }

    /// The key file that hides the store's names from etcd, from the command line or the profile:
    /// read once its checks pass (`HiddenNames.secret`), refused naming it otherwise.
    @Test func theClusterKeyFileIsReadAndAFileThatCannotServeIsRefused() throws {
        try Self.inDirectory { directory in
            let file = directory.appendingPathComponent("cluster.key").standardizedFileURL.path
            #expect(Self.refusal(["--cluster-key-file", file]) == "the cluster key file '\(file)' does not exist")
            let secret = Array(repeating: UInt8(3), count: 32)
            try Data(secret).write(to: URL(fileURLWithPath: file))
            chmod(file, 0o644)
            #expect(Self.refusal(["--cluster-key-file", file]).hasPrefix("the cluster key file '\(file)' may be read"))
            chmod(file, 0o600)
            let setting = try #require(try Self.setting(["--cluster-key-file", file]).get())
            #expect(setting.clusterKey == secret)
            let none = try #require(try Self.setting([]).get())
            #expect(none.clusterKey == nil, "names in clear without it")

            let url = directory.appendingPathComponent("shared.profile")
            try Data("cluster = etcd://10.0.0.1:2379\ncluster-store = projects\ncluster-key-file = cluster.key\n".utf8)
                .write(to: url)
            let profile = try Profile(contentsOf: url)
            #expect(profile.clusterKeyFile == file)
            let fromProfile = try #require(try ClusterOptions.parse([]).setting(over: profile, environment: [:]))
            #expect(fromProfile.clusterKey == secret)
        }
    }

    /// A cluster's option without --cluster is refused, naming it: `coordfs mount` took them
    /// silently, and the host coordinated alone.
    @Test func aClustersOptionWithoutAClusterIsRefused() throws {
        for (arguments, named) in [
            (["--etcd-user", "coordfs"], "--etcd-user"), (["--cluster-store", "projects"], "--cluster-store"),
            (["--etcd-cacert", "/etc/ca.crt"], "--etcd-cacert"),
            (["--cluster-key-file", "/etc/coordfs/cluster.key"], "--cluster-key-file")
        ] {
            let options = try ClusterOptions.parse(arguments)
            #expect(throws: CommandFailure.self, "\(arguments)") { _ = try options.setting(environment: [:]) }
            do {
                _ = try options.setting(environment: [:])
            } catch {
                #expect("\(error)".hasPrefix("\(named) is for a host of a shared store"), "\(error)")
            }
        }
        #expect(try ClusterOptions.parse([]).setting(environment: [:]) == nil, "no cluster, no option: alone")
    }
}
