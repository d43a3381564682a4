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

    /// The cluster these options (over a profile's, where given) name; nil without --cluster.
    func setting(over profile: Profile? = nil) throws -> ClusterSetting? {
        guard let url = cluster ?? profile?.cluster else { return nil }
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
        return ClusterSetting(
            endpoints: try ClusterJoin.endpoints(url), store: store, host: host, ttl: Int64(ttl),
            aloneWhenUnreachable: unreachable == .local)
    }
}

extension ClusterMember.WhenUnreachable: ExpressibleByArgument {}
