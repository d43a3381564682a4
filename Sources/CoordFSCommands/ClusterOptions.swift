import ArgumentParser
import CoordinationCluster
import CoordFSMount
import Foundation

/// The options that make a mount or the daemon a host of a store shared with other hosts
/// (`--cluster`), as `coordfs mount` and `coordfs daemon` take them.
struct ClusterOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Coordinate with the other hosts of this shared store through the etcd cluster at etcd://HOST:PORT[,HOST:PORT...] (see docs/cluster.md).",
            valueName: "etcd-url"))
    var cluster: String?

    @Option(
        help: ArgumentHelp(
            "The store's name in the cluster, needed with --cluster: hosts that name the same cluster and store coordinate.",
            valueName: "name"))
    var clusterStore: String?

    @Option(help: ArgumentHelp("This host's name in the cluster (default: the host name).", valueName: "name"))
    var hostName: String?

    @Option(
        help: ArgumentHelp(
            "Seconds the cluster keeps this host's grants after it last renewed them: how long the other hosts wait for a host that died or was cut off (default 10).",
            valueName: "seconds"))
    var clusterTTL: Int?

    @Option(
        help: ArgumentHelp(
            "What this host does once its lease is lost and etcd cannot be reached: refuse (ENOLCK for every access that needs coordination, the default) or local (coordinate this host's programs alone, with a loud warning; other hosts doing the same are not coordinated with).",
            valueName: "refuse|local"))
    var clusterUnreachable: ClusterMember.WhenUnreachable?

    @Option(
        help: ArgumentHelp(
            "The CA certificate (PEM) the etcd members' certificates are signed by: --cluster's HOST:PORT members are then reached over https.",
            valueName: "file"))
    var etcdCacert: String?

    @Option(
        help: ArgumentHelp(
            "This host's certificate (PEM), for etcd members run with --client-cert-auth; with --etcd-key. Where etcd has authentication enabled, its subject must have no Common Name (CN).",
            valueName: "file"))
    var etcdCert: String?

    @Option(help: ArgumentHelp("The private key (PEM, unencrypted) of --etcd-cert.", valueName: "file"))
    var etcdKey: String?

    @Option(
        help: ArgumentHelp(
            "The etcd user this host authenticates as, where etcd has authentication enabled; its password comes from --etcd-password-file, else from $COORDFS_ETCD_PASSWORD.",
            valueName: "name"))
    var etcdUser: String?

    @Option(
        help: ArgumentHelp(
            "A file whose first line is --etcd-user's password (readable by this host's coordfs user alone).",
            valueName: "file"))
    var etcdPasswordFile: String?

    @Option(
        help: ArgumentHelp(
            "A file of at least 32 secret bytes (readable by its owner alone) that hides the store's file names from whoever reads etcd: keys name items by keyed hashes, and their paths go encrypted. Every host of the store needs the same file (see docs/cluster.md).",
            valueName: "file"))
    var clusterKeyFile: String?

    /// The first of the options that only a cluster takes that is given, if any.
    var firstGiven: String? {
        [
            ("--cluster-store", clusterStore != nil), ("--host-name", hostName != nil),
            ("--cluster-ttl", clusterTTL != nil), ("--cluster-unreachable", clusterUnreachable != nil),
            ("--etcd-cacert", etcdCacert != nil), ("--etcd-cert", etcdCert != nil), ("--etcd-key", etcdKey != nil),
            ("--etcd-user", etcdUser != nil), ("--etcd-password-file", etcdPasswordFile != nil),
            ("--cluster-key-file", clusterKeyFile != nil)
        ].first(where: \.1)?.0
    }

    /// Where --etcd-user's password is taken from without --etcd-password-file.
    static let passwordVariable = "COORDFS_ETCD_PASSWORD"

    /// The cluster these options (over a profile's, where given) name; nil without --cluster.
    /// A TLS file or a key file that cannot be used is named here, and the password and the
    /// key read (the password from `environment` without a password file).
    func setting(
        over profile: Profile? = nil, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> ClusterSetting? {
        guard let url = cluster ?? profile?.cluster else {
            // Said, not dropped: a host meant to share a store would otherwise coordinate alone.
            if let option = firstGiven {
                throw CommandFailure("\(option) is for a host of a shared store: give --cluster too")
            }
            return nil
        }
        let ttl = clusterTTL ?? profile?.clusterTTL ?? 10
        guard (2...3600).contains(ttl) else { throw CommandFailure("--cluster-ttl must be from 2 to 3600 seconds") }
        // Named, not guessed: two unrelated stores that share a directory name must not
        // coordinate with each other through one cluster.
        guard let store = clusterStore ?? profile?.clusterStore else {
            throw CommandFailure("--cluster needs --cluster-store NAME: the name every host of this store gives it")
        }
        let host = hostName ?? profile?.hostName ?? ProcessInfo.processInfo.hostName
        for (name, value) in [("--cluster-store", store), ("--host-name", host)]
        where value.isEmpty || value.contains("\0") || value.contains("/") || value.contains("\n") {
            throw CommandFailure("\(name) must be a name of one line without '/', not '\(value)'")
        }
        let unreachable = clusterUnreachable ?? profile?.clusterUnreachable ?? .refuse
        let credentials = try self.credentials(over: profile, environment: environment)
        var setting = ClusterSetting(
            endpoints: try ClusterJoin.endpoints(url, secure: credentials.usesTLS), store: store, host: host,
            ttl: Int64(ttl), aloneWhenUnreachable: unreachable == .local)
        setting.etcdCA = credentials.certificateAuthority
        setting.etcdCertificate = credentials.certificate
        setting.etcdKey = credentials.privateKey
        setting.etcdUser = credentials.user
        setting.etcdPassword = credentials.password
        if let keyFile = clusterKeyFile.map(Mount.absolute) ?? profile?.clusterKeyFile {
            do throws(HiddenNames.KeyFileError) { setting.clusterKey = try HiddenNames.secret(inFile: keyFile) } catch {
                throw CommandFailure(error.description)
            }
        }
        return setting
    }

    /// What this host shows etcd, these options over the profile's: the TLS files checked (a
    /// mount says what is wrong with one before it detaches), the password read.
    private func credentials(over profile: Profile?, environment: [String: String]) throws -> EtcdCredentials {
        var credentials = EtcdCredentials(
            certificateAuthority: etcdCacert.map(Mount.absolute) ?? profile?.etcdCA,
            certificate: etcdCert.map(Mount.absolute) ?? profile?.etcdCertificate,
            privateKey: etcdKey.map(Mount.absolute) ?? profile?.etcdKey)
        if (credentials.certificate == nil) != (credentials.privateKey == nil) {
            throw CommandFailure("--etcd-cert and --etcd-key go together: this host's certificate and its private key")
        }
        do throws(EtcdError) { try credentials.check() } catch { throw CommandFailure(error.description) }
        let passwordFile = etcdPasswordFile.map(Mount.absolute) ?? profile?.etcdPasswordFile
        guard let user = etcdUser ?? profile?.etcdUser else {
            if passwordFile != nil {
                throw CommandFailure("--etcd-password-file is the password of --etcd-user: give --etcd-user NAME too")
            }
            return credentials
        }
        guard !user.isEmpty else { throw CommandFailure("--etcd-user must name a user") }
        credentials.user = user
        if let passwordFile {
            credentials.password = try Self.password(in: passwordFile)
        } else if let password = environment[Self.passwordVariable], !password.isEmpty {
            credentials.password = password
        } else {
            throw CommandFailure(
                "--etcd-user \(user) needs its password: --etcd-password-file FILE, or \(Self.passwordVariable) in the "
                    + "environment (never the command line)")
        }
        return credentials
    }

    /// The first line of a password file (a newline after it, as `echo` leaves, is no part of it).
    static func password(in path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            let why = FileManager.default.fileExists(atPath: path) ? "this user may not read it" : "it does not exist"
            throw CommandFailure("cannot read the etcd password file '\(path)': \(why)")
        }
        var line = Array(data).prefix(while: { $0 != UInt8(ascii: "\n") })
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        guard !line.isEmpty else {
            throw CommandFailure("the etcd password file '\(path)' is empty: its first line is the password")
        }
        return String(decoding: line, as: UTF8.self)
    }
}

extension ClusterMember.WhenUnreachable: ExpressibleByArgument {}

extension ClusterSetting {
    /// What the host shows etcd, as its etcd client takes it.
    var credentials: EtcdCredentials {
        EtcdCredentials(
            certificateAuthority: etcdCA, certificate: etcdCertificate, privateKey: etcdKey, user: etcdUser,
            password: etcdPassword)
    }
}
