import LinuxSystem
import Coordination
import CoordinationWire
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Who made the access a presenter is asked or told about (docs/swift.md): the process, its user and
/// command, the coordinator's purpose identifier, and how the access came — through a mount from
/// a program, from a coordinator (a `FileCoordinator`, a socket client's hold), or from outside
/// the mount, where nobody coordinated it. Apple's presenters never learn this.
public struct AccessOrigin: Sendable, Hashable, CustomStringConvertible {
    /// How an access came.
    public enum Route: String, Sendable, CaseIterable {
        /// A program's open, create, rename or unlink through a coordfs mount.
        case mount
        /// A coordinator: a `FileCoordinator`, or a hold taken through a control socket.
        case coordinator
        /// A change made behind the mount, which nobody coordinated.
        case outside
        /// Another host of a shared store (`--cluster`), through its own mount.
        case cluster
    }

    /// How the access came.
    public var via: Route
    /// The process that made it; nil when unknown (a change made behind the mount).
    public var pid: Int32?
    /// Its user (the filesystem uid); nil when unknown, or its process has ended.
    public var uid: UInt32?
    /// Its command name (`/proc/PID/comm`); nil when unknown.
    public var command: String?
    /// The coordinator's purpose identifier, where it has one (`FileCoordinator.purposeIdentifier`).
    public var purposeIdentifier: String?
    /// The other host of a shared store whose programs made it (`via` `.cluster`).
    public var host: String?

    /// An origin; fields left out are unknown.
    public init(
        via: Route, pid: Int32? = nil, uid: UInt32? = nil, command: String? = nil, purposeIdentifier: String? = nil,
        host: String? = nil
    ) {
        self.via = via
        self.pid = pid
        self.uid = uid
        self.command = command
        self.purposeIdentifier = purposeIdentifier
        self.host = host
    }

    /// "via mount, pid 4711 (cat), uid 1000".
    public var description: String {
        var words = ["via \(via.rawValue)" + (host.map { " from host \($0)" } ?? "")]
        if let pid { words.append("pid \(pid)" + (command.map { " (\($0))" } ?? "")) }
        if let uid { words.append("uid \(uid)") }
        if let purposeIdentifier { words.append("purpose \(purposeIdentifier)") }
        return words.joined(separator: ", ")
    }

    /// The origin of the message a presenter's callback is running for, on the thread that runs
    /// it (its queue's): read it inside `relinquishPresentedItem(toWriter:)`,
    /// `presentedItemDidChange()` and the others. Nil outside a callback.
    public static var current: AccessOrigin? { CurrentMessage.local.withValue { $0.origin } }
}

extension AccessOrigin {
    /// As an event of the control socket carries it.
    package var event: EventOrigin {
        EventOrigin(
            via: via.rawValue, pid: pid.map(Int.init), uid: uid.map(Int.init), command: command,
            purpose: purposeIdentifier,
            host: host)
    }

    /// What an event says; none, or a route this side does not know, is a change from outside.
    package init(_ event: EventOrigin?) {
        guard let event else { self.init(via: .outside); return }
        self.init(
            via: Route(rawValue: event.via) ?? .outside, pid: event.pid.flatMap { Int32(exactly: $0) },
            uid: event.uid.flatMap { UInt32(exactly: $0) }, command: event.command, purposeIdentifier: event.purpose,
            host: event.host)
    }
}

/// What a presenter's callback runs for, per thread: set by whoever runs the callback.
package enum CurrentMessage {
    package struct Value {
        package var origin: AccessOrigin?
        package var progress: PresenterProgress?
    }

    package static let local = ThreadLocal { Value() }

    /// Runs `body` with `origin` (and `progress`, for a request) as the thread's current message.
    package static func with<T>(
        _ origin: AccessOrigin?, progress: PresenterProgress? = nil, _ body: () throws -> T
    ) rethrows -> T {
        let saved = local.withValue { value -> Value in
            defer { value = Value(origin: origin, progress: progress) }
            return value
        }
        defer { local.withValue { $0 = saved } }
        return try body()
    }
}

/// A presenter's way to say that it is still working on a request (saving a large document,
/// fetching from the network): each call gives it another presenter timeout to answer, up to a
/// bound the domain sets (`CoordinationDomain.presenterWorkLimit`), as cloud-file providers
/// report progress. Calls after the answer do nothing.
public final class PresenterProgress: Sendable {
    private let report: @Sendable () -> Void

    package init(_ report: @escaping @Sendable () -> Void) { self.report = report }

    /// The presenter needs longer: its deadline moves one presenter timeout on from now.
    public func stillWorking() { report() }

    /// The request a presenter's callback is running for, on the thread that runs it: keep it
    /// to report progress later, from any thread. Nil outside a request's callback.
    public static var current: PresenterProgress? { CurrentMessage.local.withValue { $0.progress } }
}

/// The origins of accesses, made from the coordinators' identities: the process's user and
/// command are read from /proc once and kept a little while, since a watcher may hear of
/// thousands of one program's accesses a second.
package enum AccessOrigins {
    private struct Known {
        let uid: UInt32?
        let command: String?
        let at: ContinuousClock.Instant
    }

    private static let known = Mutex<[Int32: Known]>([:])
    /// How long a process's user and command are kept: a pid used again by a new process within
    /// it is named as the old one.
    private static let keptFor = Duration.seconds(2)

    /// The origin of an access by `identity`: through a mount for a process, from a coordinator
    /// for the rest; `nil` is an access nobody coordinated (from outside the mount).
    package static func origin(
        of identity: CoordinatorIdentity?, purposes: (CoordinatorIdentity) -> String? = { _ in nil }
    ) -> AccessOrigin {
        guard let identity else { return AccessOrigin(via: .outside) }
        switch identity {
        case .process(let pid):
            let (uid, command) = process(pid)
            return AccessOrigin(via: .mount, pid: pid, uid: uid, command: command)
        case .client(let pid, _):
            let (uid, command) = process(pid)
            return AccessOrigin(
                via: .coordinator, pid: pid, uid: uid, command: command, purposeIdentifier: purposes(identity))
        case .purpose(let purpose):
            let (uid, command) = process(getpid())
            return AccessOrigin(
                via: .coordinator, pid: getpid(), uid: uid, command: command, purposeIdentifier: purpose)
        case .object:
            let (uid, command) = process(getpid())
            return AccessOrigin(via: .coordinator, pid: getpid(), uid: uid, command: command)
        case .host(let name):
            return AccessOrigin(via: .cluster, host: name)
        }
    }

    /// `identity` as a person reads it: "pid 4242 (vim)", with a coordinator's purpose in brackets.
    package static func describe(_ identity: CoordinatorIdentity) -> String {
        let origin = origin(of: identity)
        var text = origin.pid.map { "pid \($0)" + (origin.command.map { " (\($0))" } ?? "") } ?? identity.description
        if let purpose = origin.purposeIdentifier { text += " [\(purpose)]" }
        return text
    }

    /// The filesystem uid and the command of `pid`, nil for a process that has gone.
    /// Reads `pid`'s user and command while it runs, for a notification that may be told
    /// after it has ended (a write open's changes are told at its release, which the kernel
    /// sends after close(2) has returned).
    package static func remember(_ pid: Int32) { _ = process(pid) }

    private static func process(_ pid: Int32) -> (UInt32?, String?) {
        let now = ContinuousClock.now
        let entry = known.withLock({ $0[pid] })
        if let entry, now - entry.at < keptFor { return (entry.uid, entry.command) }
        guard let fields = ProcFile.statusFields(["Name", "Uid"], of: pid) else {
            // Ended: what was read while it ran, however long ago.
            return (entry?.uid, entry?.command)
        }
        let uid = fields["Uid"].flatMap(CoordinatorUsers.filesystemUser)
        let command = fields["Name"]
        known.withLock { table in
            if table.count >= 4096 { table.removeAll(keepingCapacity: true) }
            table[pid] = Known(uid: uid, command: command, at: now)
        }
        return (uid, command)
    }
}
