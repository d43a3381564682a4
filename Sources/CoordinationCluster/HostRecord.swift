import Foundation

/// A host's run in a store, recorded at join as `/coordfs/<store>/hosts/<host>\0<lease>` (of the
/// run's lease), so that hosts that could not coordinate with each other find out before either
/// grants anything:
///
/// - hosts of one store must read each other's keys alike: a host whose coordfs speaks another
///   `format` would drop keys of modes it does not know, neither waiting for them nor being
///   recalled by them;
/// - news and status requests are addressed by host name: two live runs under one name would
///   take each other's. A run of the same name here whose process is gone (a daemon killed and
///   started again within its TTL), or of this process (a run that lost its lease), is an
///   earlier run of this host; one on another machine (or in another container) is waited for
///   until its lease's TTL has passed, and refused if it is still there.
struct HostRecord: Codable, Equatable, Sendable {
    /// The form of the store's keys and what each mode asks of the hosts it recalls (3: a
    /// directory asked for on a replica's word is marked tentative, and recalls nobody; 4: a
    /// request that does not wait is marked, and a holder whose programs are in its way refuses it).
    static let currentFormat = 4

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

    /// This process's record.
    static func this(release: String, ttl: Int64) -> HostRecord {
        HostRecord(format: currentFormat, machine: here.machine, boot: here.boot, pidNamespace: here.pidNamespace,
                   pid: getpid(), started: start(of: getpid()) ?? 0, ttl: ttl, release: release)
    }

    private static let here = (machine: contents("/etc/machine-id"), boot: contents("/proc/sys/kernel/random/boot_id"),
                               pidNamespace: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")) ?? "")

    /// When process `pid` started, or nil when there is none.
    static func start(of pid: Int32) -> UInt64? {
        let stat = contents("/proc/\(pid)/stat")
        // Fields after the command's closing parenthesis, the 22nd of all the 20th of these.
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
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
        /// A live run of another process with this host's name (`hereAndLive`: one whose
        /// process is seen running here; else one that may have died, waited for until `ttl`).
        case name(String, machine: String, hereAndLive: Bool, ttl: Int64)

        var description: String {
            switch self {
            case .format(let host, let format, let release):
                "host '\(host)' of this store runs coordfs \(release.isEmpty ? "of another release" : release) (cluster format \(format), this coordfs's is \(HostRecord.currentFormat)): every host of a store must run the same coordfs"
            case .name(let host, let machine, let hereAndLive, let ttl):
                "another host of this store is named '\(host)'\(machine.isEmpty ? "" : " (machine \(machine.prefix(8)))"): give each host its own --host-name"
                    + (hereAndLive ? "" : " (one that stopped keeps its name for its TTL, \(ttl) s)")
            }
        }
    }

    /// The first conflict of a run of `host` with `others` (host name and record, its own
    /// record left out): a format conflict first, as waiting does not mend it.
    static func conflict(of host: String, with others: [(host: String, record: HostRecord?)]) -> Conflict? {
        for other in others where other.record?.format != currentFormat {
            return .format(host: other.host, format: other.record?.format ?? 0, release: other.record?.release ?? "")
        }
        for other in others where other.host == host && other.record!.mayBeLive {
            let record = other.record!
            return .name(host, machine: record.machine, hereAndLive: record.isOfThisPIDNamespace, ttl: record.ttl)
        }
        return nil
    }
}

extension Delegations {
    /// Records this run of the host in the store (with its lease) and checks that it may join:
    /// throws `.cannotJoin` (its record taken back) when another host runs another format, or
    /// when another run with this host's name stays live past its TTL.
    func record(release: String) async throws(Failure) {
        let records = Array("/coordfs/\(store)/hosts/".utf8)
        let mine = records + Array(host.utf8) + [0] + Array(String(lease.id, radix: 16).utf8)
        let began = ContinuousClock.now
        do {
            let encoded = try JSONEncoder().encode(HostRecord.this(release: release, ttl: lease.ttl))
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
                let name = value.key[records.count...].split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
                return (host: String(decoding: name, as: UTF8.self), record: try? JSONDecoder().decode(HostRecord.self, from: Data(value.value)))
            }
            guard let conflict = HostRecord.conflict(of: host, with: others) else { return }
            // A run of this name elsewhere may be a dead one whose lease has yet to end: waited
            // for as long as its TTL, up to this host's (within which a join is waited for).
            if case .name(_, _, hereAndLive: false, let ttl) = conflict, ContinuousClock.now < began + .seconds(min(ttl, lease.ttl) + 1) {
                try? await Task.sleep(for: .milliseconds(500))
                continue
            }
            _ = try? await client.delete(mine)
            throw .cannotJoin(conflict.description)
        }
    }
}
