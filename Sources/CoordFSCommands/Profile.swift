import CoordFSMount
import CoordinationCluster
import FileCoordination
import FileVersions
import Foundation

/// A named mount profile: `Mounts/NAME.profile`, lines of `key = value`, `#` comments.
///
///     backing = demo                 # relative paths are relative to the profile's folder
///     mountpoint = run/demo
///     coordination = exclusive       # exclusive | strict | notify | off
///     wait-timeout = 30              # seconds; 0 fails at once, infinity waits forever
///     presenter-timeout = 5
///     break-time = 45                # seconds an access waits at most for another program's open file
///     settle-time = 1                # seconds a file held open for writing must stay unchanged
///     lock-time = 1                  # seconds an rm or mv waits at most for another user's hold
///     cache-timeout = 1              # seconds the kernel keeps names and attributes
///     package-extensions = pkg, bundle
///     options = allow_other          # FUSE -o options
///     log = /var/log/coordfs-demo.log   # the daemon's log (default: the system log)
///     vetoes = own-user              # own-user | anyone: whose refusals fail whose accesses
///     open-files-per-user = 2000     # for users other than the mount's owner and root
///     cluster = etcd://10.0.0.1:2379,10.0.0.2:2379   # hosts sharing the store coordinate
///     cluster-store = projects       # the store's name in the cluster
///     host-name = render-3           # this host's name in it
///     cluster-ttl = 10               # seconds others wait for a host that died
///     cluster-unreachable = refuse   # refuse | local, once etcd cannot be reached
///     etcd-cacert = /etc/coordfs/etcd-ca.crt      # https members: the CA of their certificates
///     etcd-cert = /etc/coordfs/etcd-host.crt      # this host's certificate and key, for
///     etcd-key = /etc/coordfs/etcd-host.key       # members run with --client-cert-auth
///     etcd-user = coordfs                         # etcd's user, where authentication is on
///     etcd-password-file = /etc/coordfs/etcd-password   # its password, on the first line
///     cluster-key-file = /etc/coordfs/cluster.key       # file names hidden from etcd
///     mode *.log = notify            # per path glob, first match wins
///     mode *.db = strict             # every writer excludes every other open
///     versions = keep                # keep | refuse | off: what is kept of replaced content
///     versions *.tmp = off           # per path glob, first match wins
///     version-readers = session      # session | process-group | process | user
///     versions-per-item = 32
///     versions-total = 1G
///     versions-age = 30              # days
///     version-copy-limit = 64M
struct Profile {
    var backing: String?
    var mountPoint: String?
    var mode: CoordinationMode?
    var waitTimeout: Double?
    var presenterTimeout: Double?
    var breakTime: Double?
    var settleTime: Double?
    var lockTime: Double?
    var cacheTimeout: Double?
    var backingWatch: Bool?
    /// `backing-watch = directories`: a mark on each directory.
    var backingWatchByDirectory = false
    var packageExtensions: [String] = []
    var options: [String] = []
    /// The file the daemon logs to (`--log`).
    var log: String?
    var rules: [(String, CoordinationMode)] = []
    var writebackCache = false
    var kernelPassthrough = true
    var ioUring = true
    var ringLanes: RingLanes?
    var serveNice: Int?
    var threads: Int?
    var vetoScope: VetoScope?
    var openFilesPerUser: Int?
    var cluster: String?
    var clusterStore: String?
    var hostName: String?
    var clusterTTL: Int?
    var clusterUnreachable: ClusterMember.WhenUnreachable?
    var etcdCA: String?
    var etcdCertificate: String?
    var etcdKey: String?
    var etcdUser: String?
    var etcdPasswordFile: String?
    var clusterKeyFile: String?
    var versionPolicy: VersionPolicy?
    var versionRules: [(pattern: String, policy: VersionPolicy)] = []
    var versionReaders: ReaderIdentity?
    var versionsPerItem: Int?
    var versionsTotal: String?
    var versionsAge: Double?
    var versionCopyLimit: String?

    /// Finds `name` as a path, or as `NAME.profile` in $COORDFS_MOUNTS or ./Mounts.
    static func locate(_ name: String) -> URL? {
        let fileManager = FileManager.default
        if name.contains("/") { return fileManager.fileExists(atPath: name) ? URL(fileURLWithPath: name) : nil }
        let folders = [
            ProcessInfo.processInfo.environment["COORDFS_MOUNTS"], fileManager.currentDirectoryPath + "/Mounts"
        ]
        for folder in folders.compactMap({ $0 }) {
            let candidate = URL(fileURLWithPath: folder).appendingPathComponent(name + ".profile")
            if fileManager.fileExists(atPath: candidate.path) { return candidate }
        }
        return nil
    }

    init(contentsOf url: URL) throws {
        let folder = url.deletingLastPathComponent()
        func resolve(_ path: String) -> String {
            path.hasPrefix("/") ? path : folder.appendingPathComponent(path).standardizedFileURL.path
        }
        let text = try String(contentsOf: url, encoding: .utf8)
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line =
                rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init)?
                .trimmingCharacters(in: .whitespaces) ?? ""
            if line.isEmpty { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw ProfileError("\(url.path):\(number + 1): expected 'key = value'")
            }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            func mode(_ text: String) throws -> CoordinationMode {
                guard let mode = CoordinationMode(rawValue: text) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): mode must be exclusive, strict, notify or off, not '\(text)'")
                }
                return mode
            }
            func policy(_ text: String) throws -> VersionPolicy {
                guard let policy = VersionPolicy(rawValue: text) else {
                    throw ProfileError("\(url.path):\(number + 1): versions must be keep, refuse or off, not '\(text)'")
                }
                return policy
            }
            func boolean(_ text: String) throws -> Bool {
                if ["true", "yes", "on", "1"].contains(text) { return true }
                if ["false", "no", "off", "0"].contains(text) { return false }
                throw ProfileError("\(url.path):\(number + 1): '\(key)' must be on or off, not '\(text)'")
            }
            func seconds(_ text: String) throws -> Double {
                guard let value = Double(text), value >= 0 else {
                    throw ProfileError("\(url.path):\(number + 1): '\(text)' is not a number of seconds")
                }
                return value
            }
            switch key {
            case "backing": backing = resolve(value)
            case "mountpoint": mountPoint = resolve(value)
            case "coordination": self.mode = try mode(value)
            case "wait-timeout": waitTimeout = try seconds(value)
            case "presenter-timeout": presenterTimeout = try seconds(value)
            case "break-time": breakTime = try seconds(value)
            case "settle-time": settleTime = try seconds(value)
            case "lock-time": lockTime = try seconds(value)
            case "cache-timeout": cacheTimeout = try seconds(value)
            case "backing-watch":
                if value == "directories" {
                    backingWatch = true; backingWatchByDirectory = true
                } else {
                    backingWatch = try boolean(value)
                }
            case "package-extensions":
                packageExtensions = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            case "writeback-cache": writebackCache = try boolean(value)
            case "kernel-passthrough": kernelPassthrough = try boolean(value)
            case "io-uring": ioUring = try boolean(value)
            case "ring-lanes":
                guard let lanes = RingLanes(rawValue: value) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): ring-lanes must be auto, all or blocking, not '\(value)'")
                }
                ringLanes = lanes
            case "serve-nice":
                guard let nice = Int(value), MountCommandLimits.nice.contains(nice) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): serve-nice must be a whole number from \(MountCommandLimits.nice.lowerBound) to \(MountCommandLimits.nice.upperBound), not '\(value)'"
                    )
                }
                serveNice = nice
            case "threads":
                guard let count = Int(value), MountCommandLimits.threads.contains(count) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): threads must be a whole number from 1 to \(MountCommandLimits.threads.upperBound), not '\(value)'"
                    )
                }
                threads = count
            case "vetoes":
                guard let scope = VetoScope(rawValue: value) else {
                    throw ProfileError("\(url.path):\(number + 1): vetoes must be own-user or anyone, not '\(value)'")
                }
                vetoScope = scope
            case "open-files-per-user":
                guard let count = Int(value), count >= 1 else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): open-files-per-user must be a whole number of at least 1, not '\(value)'"
                    )
                }
                openFilesPerUser = count
            case "cluster": cluster = value
            case "cluster-store": clusterStore = value
            case "host-name": hostName = value
            case "cluster-ttl":
                guard let seconds = Int(value), seconds >= 2 else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): cluster-ttl must be a whole number of seconds, at least 2, not '\(value)'"
                    )
                }
                clusterTTL = seconds
            case "cluster-unreachable":
                guard let choice = ClusterMember.WhenUnreachable(rawValue: value) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): cluster-unreachable must be refuse or local, not '\(value)'")
                }
                clusterUnreachable = choice
            case "etcd-cacert": etcdCA = resolve(value)
            case "etcd-cert": etcdCertificate = resolve(value)
            case "etcd-key": etcdKey = resolve(value)
            case "etcd-user": etcdUser = value
            case "etcd-password-file": etcdPasswordFile = resolve(value)
            case "cluster-key-file": clusterKeyFile = resolve(value)
            case "etcd-password":
                throw ProfileError(
                    "\(url.path):\(number + 1): a profile names the password's file (etcd-password-file), not the password"
                )
            case "log": log = resolve(value)
            case "options":
                options = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
                    !$0.isEmpty
                }
            case "versions": versionPolicy = try policy(value)
            case "version-readers":
                guard let readers = ReaderIdentity(rawValue: value) else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): version-readers must be session, process-group, process or user, not '\(value)'"
                    )
                }
                versionReaders = readers
            case "versions-per-item":
                guard let count = Int(value), count >= 1 else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): versions-per-item must be a whole number of at least 1, not '\(value)'"
                    )
                }
                versionsPerItem = count
            case "versions-total", "version-copy-limit":
                guard VersionOptions.bytes(value) != nil else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): \(key) must be a size such as 512M or 2G, not '\(value)'")
                }
                if key == "versions-total" { versionsTotal = value } else { versionCopyLimit = value }
            case "versions-age":
                guard let days = Double(value), days > 0 else {
                    throw ProfileError(
                        "\(url.path):\(number + 1): versions-age must be a number of days, not '\(value)'")
                }
                versionsAge = days
            case _ where key.hasPrefix("versions "):
                versionRules.append((key.dropFirst(9).trimmingCharacters(in: .whitespaces), try policy(value)))
            case _ where key.hasPrefix("mode "):
                rules.append((key.dropFirst(5).trimmingCharacters(in: .whitespaces), try mode(value)))
            default:
                throw ProfileError("\(url.path):\(number + 1): unknown key '\(key)'")
            }
        }
    }
}

struct ProfileError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
