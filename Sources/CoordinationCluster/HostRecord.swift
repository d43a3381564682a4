import Foundation

/// A host's run in a store, recorded at join as `/coordfs/<store>/hosts/<host>\0<lease>` (of the
/// run's lease), so that hosts that could not coordinate with each other find out before either
/// grants anything:
///
/// - hosts of one store must read each other's keys alike: a host whose coordfs speaks another
///   `format` would drop keys of modes it does not know, neither waiting for them nor being
///   recalled by them, and one that names the store's items otherwise (`names`: in clear, or
///   hidden with another secret) would not read the others' keys at all;
/// - news and status requests are addressed by host name: two live runs under one name would
///   take each other's. A run of the same name here whose process is gone (a daemon killed and
///   started again within its TTL), or of this process (a run that lost its lease), is an
///   earlier run of this host; one on another machine (or in another container) is waited for
///   while its lease's time left fits this host's TTL, and refused if it is still there: as a
///   live host of that name if it renewed its lease meanwhile, else as an earlier run whose
///   lease etcd keeps for the time it names.
struct HostRecord: Codable, Equatable, Sendable {
    /// The form of the store's keys and what each mode asks of the hosts it recalls (3: a
    /// directory asked for on a replica's word is marked tentative, and recalls nobody; 4: a
    /// request that does not wait is marked, and a holder whose programs are in its way refuses it;
    /// 5: files' flock and fcntl locks are delegated too, under `locks/`, which an older host
    /// would not look at; 6: a key carries the access asked for, and the holder's answer
    /// (let past, refused with an errno, a question granted); writers that share an item
    /// (`a`, `s`) and a read's question to presenters (`q`) are modes of their own, which an
    /// older host would drop); 7: a record says whether the store's item names are hidden
    /// (`names`), which a host that names them otherwise must not overlook).
    static let currentFormat = 7

    var format: Int
    /// `/etc/machine-id`, the boot's id and the pid namespace: which machine, since when, and
    /// whether `pid` can be looked up here.
    var machine: String
    var boot: String
    var pidNamespace: String
    var pid: Int32
    /// The process's start, in clock ticks after boot (`/proc/PID/stat`): a pid used again by
    /// another process is not the run.
    var started: UInt64
    /// The lease's TTL: how long a run that died keeps its record.
    var ttl: Int64
    /// The coordfs release that wrote it, for the messages.
    var release: String
    /// With the store's item names hidden from etcd, the secret's verifier
    /// (`HiddenNames.verifier`); nil: the names are in clear.
    var names: String? = nil

    /// This process's record; `names`, the verifier of the secret it hides names with.
    static func this(release: String, ttl: Int64, names: String? = nil) -> HostRecord {
        HostRecord(
            format: currentFormat, machine: here.machine, boot: here.boot, pidNamespace: here.pidNamespace,
            pid: getpid(), started: start(of: getpid()) ?? 0, ttl: ttl, release: release, names: names)
    }

    private static let here = (
        machine: contents("/etc/machine-id"), boot: contents("/proc/sys/kernel/random/boot_id"),
        pidNamespace: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")) ?? ""
    )

    /// When process `pid` started, or nil when there is none. A process that has ended but
    /// not been reaped (a zombie: a daemon killed where nobody waits for its children, as in
    /// a container whose first process reaps none) is none: it runs nothing.
    static func start(of pid: Int32) -> UInt64? {
        let stat = contents("/proc/\(pid)/stat")
        // Fields after the command's closing parenthesis: its state first, its start the 22nd
        // of all, the 20th of these.
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let state = fields.first, !["Z", "X", "x"].contains(state) else { return nil }
        return UInt64(fields[19])
    }

    private static func contents(_ path: String) -> String {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Whether the record's process can be looked up here: this machine's present boot, this
    /// pid namespace (a container on the same machine has its own).
    var isOfThisPIDNamespace: Bool {
        !machine.isEmpty && !pidNamespace.isEmpty
            && (machine, boot, pidNamespace) == (Self.here.machine, Self.here.boot, Self.here.pidNamespace)
    }

    /// Whether a run recorded with the same host name may still be live: not an earlier run of
    /// this process, nor one here whose process is gone.
    var mayBeLive: Bool {
        guard isOfThisPIDNamespace else { return true }
        return pid != getpid() && Self.start(of: pid) == started
    }

    /// Why a host cannot join a store with `others` in it.
    enum Conflict: Error, Equatable, CustomStringConvertible {
        /// A host writing keys of another form.
        case format(host: String, format: Int, release: String)
        /// A host that names the store's items otherwise: `theirs` and `ours` the verifiers of
        /// the secrets that hide them (nil: in clear).
        case names(host: String, theirs: String?, ours: String?)
        /// A live run of another process with this host's name, seen running here (`pid`).
        case nameHere(String, pid: Int32)
        /// A run with this host's name elsewhere (another machine, or another pid namespace),
        /// whose process cannot be looked up: `renewing`, it renewed its lease while this host
        /// waited (a live host); else an earlier run (killed, or cut off) whose lease etcd keeps
        /// `left` seconds more (nil: not asked yet), `ttl` the TTL it recorded.
        case nameElsewhere(String, machine: String, pid: Int32, renewing: Bool, left: Int64?, ttl: Int64)

        var description: String {
            switch self {
            case .format(let host, let format, let release):
                "host '\(host)' of this store runs coordfs \(release.isEmpty ? "of another release" : release) (cluster format \(format), this coordfs's is \(HostRecord.currentFormat)): every host of a store must run the same coordfs"
            case .names(let host, nil, _):
                "host '\(host)' of this store keeps its file names in clear in etcd, and this host hides them (--cluster-key-file): every host of a store must be given the same key file, or none"
            case .names(let host, _, nil):
                "host '\(host)' of this store hides its file names in etcd (--cluster-key-file), and this host was given no key file: every host of a store must be given the same key file"
            case .names(let host, _, _):
                "host '\(host)' of this store hides its file names with another key (--cluster-key-file): every host of a store must be given the same key file"
            case .nameHere(let host, let pid):
                "another host of this store is named '\(host)' (a coordfs running here, pid \(pid)): give each host its own --host-name"
            case .nameElsewhere(let host, let machine, _, true, _, _):
                "another host of this store is named '\(host)'\(machine.isEmpty ? "" : " (machine \(machine.prefix(8)))") and renews its lease: give each host its own --host-name"
            case .nameElsewhere(let host, let machine, let pid, false, let left, let ttl):
                "the name '\(host)' is still held by an earlier run\(machine.isEmpty ? "" : " on machine \(machine.prefix(8))") (pid \(pid) there), which no longer renews its lease: "
                    + (left.map { "etcd ends that lease in \($0) s" } ?? "etcd ends that lease within its TTL, \(ttl) s")
                    + " (a run killed or cut off keeps its name until then); mount again after that, or, if that run is another host's, give each host its own --host-name"
            }
        }
    }

    /// The first conflict of a run of `host` that hides names with the secret of verifier
    /// `names` (nil: in clear) with `others` (host name, record and the lease it lives by, its
    /// own record left out): a conflict of format or of names first, as waiting does not mend it.
    static func conflict(
        of host: String, names: String? = nil, with others: [(host: String, record: HostRecord?, lease: Int64)]
    ) -> (Conflict, lease: Int64)? {
        for other in others where other.record?.format != currentFormat {
            return (
                .format(host: other.host, format: other.record?.format ?? 0, release: other.record?.release ?? ""),
                other.lease
            )
        }
        // (An earlier run of this host too: its keys, under a lease etcd still has, must be read.)
        for other in others where other.record!.names != names {
            return (.names(host: other.host, theirs: other.record!.names, ours: names), other.lease)
        }
        for other in others where other.host == host && other.record!.mayBeLive {
            let record = other.record!
            if record.isOfThisPIDNamespace { return (.nameHere(host, pid: record.pid), other.lease) }
            return (
                .nameElsewhere(
                    host, machine: record.machine, pid: record.pid, renewing: false, left: nil, ttl: record.ttl),
                other.lease
            )
        }
        return nil
    }
}

extension Delegations {
    /// Records this run of the host in the store (with its lease) and checks that it may join:
    /// throws `.cannotJoin` (its record taken back) when another host runs another format, or
    /// names the store's items otherwise (`HiddenNames`: in clear, or with another secret), or
    /// when another run with this host's name is live here, or elsewhere keeps its lease longer
    /// than this host's TTL (saying whether it renews it, or how long etcd keeps it still).
    func record(release: String) async throws(Failure) {
        let records = Array("/coordfs/\(store)/hosts/".utf8)
        let mine = records + Array(host.utf8) + [0] + Array(String(lease.id, radix: 16).utf8)
        let began = ContinuousClock.now
        // The lease of a run of this name elsewhere, and the time it had left when last asked:
        // one that grows was renewed.
        var lastLook: (lease: Int64, left: Int64)?
        var renewing = false
        let names = keys.names?.verifier
        do {
            let encoded = try JSONEncoder().encode(HostRecord.this(release: release, ttl: lease.ttl, names: names))
            _ = try await client.put(mine, Array(encoded), lease: lease.id)
        } catch let error as EtcdError {
            throw .etcd(error)
        } catch {
            preconditionFailure("a host record always encodes: \(error)")
        }
        while true {
            let values: [EtcdKeyValue]
            do { values = try await client.get(records, prefix: true).values } catch { throw .etcd(error) }
            let others = values.filter { $0.key != mine }.map { value in
                let name =
                    value.key[records.count...].split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
                    .first ?? []
                return (
                    host: String(decoding: name, as: UTF8.self),
                    record: try? JSONDecoder().decode(HostRecord.self, from: Data(value.value)),
                    lease: value.lease
                )
            }
            guard let found = HostRecord.conflict(of: host, names: names, with: others) else { return }
            var conflict = found.0
            // A run here seen running may be one being killed (a mount again right after its
            // daemon's kill -9): given half a second to end.
            if case .nameHere = conflict, ContinuousClock.now < began + .milliseconds(500) {
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            // A run of this name elsewhere may be a dead one whose lease has yet to end: waited
            // for as long as its TTL, up to this host's (within which a join is waited for),
            // watching what etcd says its lease has left, for the refusal to say why.
            if case .nameElsewhere(let name, let machine, let pid, _, _, let ttl) = conflict {
                if let left = try? await client.timeToLive(found.lease) {
                    if let lastLook, lastLook.lease == found.lease, left > lastLook.left { renewing = true }
                    lastLook = (found.lease, left)
                }
                let left = lastLook?.lease == found.lease ? lastLook?.left : nil
                conflict = .nameElsewhere(name, machine: machine, pid: pid, renewing: renewing, left: left, ttl: ttl)
                if ContinuousClock.now < began + .seconds(min(ttl, lease.ttl) + 1) {
                    try? await Task.sleep(for: .milliseconds(500))
                    continue
                }
            }
            _ = try? await client.delete(mine)
            throw .cannotJoin(conflict.description)
        }
    }
}
