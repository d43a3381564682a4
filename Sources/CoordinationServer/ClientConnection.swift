import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables are behind `lock`; lines go out through the outbox.
/// One client of the control socket: its watches (remote presenters), its holds, and the
/// requests it has yet to answer. When it closes or dies, all of them end at once and nothing
/// waits on it (X4).
///
/// Its state is declared here; what it does is in a file per concern: `ClientConnection+Reading`
/// (lines in, the hello deadline), `+Dispatch` (each message to its handler), `+Holds`,
/// `+Watches` (and the requests the client's presenters answer), `+Services`, and `+Ending`
/// (everything the client had ends with the connection).
final class ClientConnection: @unchecked Sendable {
    let fd: Int32
    let peer: PeerCredentials
    /// Strong: a connection's thread still ends its client's watches and holds through the
    /// server after `stop()`, which may be the server's last reference. (Unowned, that end
    /// would crash a process whose server goes first.) The cycle ends when the connection closes
    /// and the server forgets it.
    let server: ControlServer
    let lock = NSLock()
    let outbox: Outbox
    var greeted = false
    var closed = false
    /// The socket's descriptor is closed: its number may name another descriptor of the
    /// process now, which nothing here may touch.
    var descriptorClosed = false
    var watches: [Int: RemotePresenter] = [:]
    /// Coordinators the client named in its holds, with how many holds use each.
    var namedCoordinators: [String: (identity: CoordinatorIdentity, holds: Int)] = [:]
    var holds: [Int: Held] = [:]
    var inheritingHolds: Set<Int> = []
    /// The processes this connection has told the domain inherit (`updateInheritance`).
    var inheritingProcesses: Set<Int32> = []
    var pendingHolds: [Int: CoordinatedAccess] = [:]
    /// Pending holds the server's `HoldWaitWatch` watches, by request: what ends each watch.
    var watchedHolds: [Int: @Sendable () -> Void] = [:]
    /// Holds waiting at the server's claim gate (`ClaimGate`), by request: how to stop each.
    var pendingAdmissions: [Int: @Sendable () -> Void] = [:]
    /// The requests the client has yet to answer, by cookie: where its answer goes, and its word
    /// that it is still working.
    var answers: [UInt64: (answered: @Sendable (Int32) -> Void, progress: PresenterProgress?)] = [:]
    var vended: Set<ServiceRegistrationID> = []
    var lastNumber = 0
    var lastCookie: UInt64 = 0
    /// Descriptors the client sent with its lines (SCM_RIGHTS), oldest first, for the request
    /// that takes one (`add_version`); those no line took are closed once its lines are read.
    var receivedDescriptors: [Int32] = []

    init(fd: Int32, peer: PeerCredentials, server: ControlServer) {
        self.fd = fd
        self.peer = peer
        self.server = server
        // What waits for the client to read is its user's memory, as its holds are.
        self.outbox = Outbox(fd: fd, memory: UserMemory(counts: server.counts, uid: peer.uid))
    }

    /// The client's process, as owner of its services.
    var identity: CoordinatorIdentity { .process(peer.pid) }

    /// A granted hold: the claim, its place among the accessor holds of the process, and which
    /// of its items existed when it was granted (for what presenters are told at its end).
    struct Held {
        let claim: Claim
        /// The client's name for its coordinator, if it gave one.
        let coordinatorName: String?
        /// The coordinator it holds for.
        var coordinator: CoordinatorIdentity? = nil
        /// Taken inside another hold of the same coordinator that covers its items (an access
        /// of a prepared batch, a nested one): it holds, asks and tells nothing of its own; the
        /// outer hold, whose claim it shares, did and will.
        var nested = false
        /// The process whose accesses through a mount are the hold's: the client, or the
        /// ancestor it named (`holder`).
        var holder: Int32 = 0
        let token: UInt64
        let realPaths: [String]
        let existedBefore: [Bool]
        /// What it is counted as against its user's memory (`ClientLimits.bytes(ofHoldOn:)`),
        /// given back at its end.
        var bytes = 0
        /// On a host of a shared store, its stamp against the host's losses of cover
        /// (`ClaimGate.coverStamp`): its release says whether it lost its cover since.
        var cover: UInt64? = nil
    }

    /// A coordinator of this client: a hold, or a watch and the holds taken for it.
    func newCoordinator() -> CoordinatorIdentity { .client(process: peer.pid, number: server.nextCoordinatorNumber()) }

    /// Whether the client may learn of `path`: it could read the directory that lists it.
    func mayLearn(of path: String) -> Bool {
        if peer.uid == 0 { return true }
        let parent = (path as NSString).deletingLastPathComponent
        guard let resolved = try? server.resolver.resolve(parent.isEmpty ? "/" : parent) else { return false }
        return Permissions.allows(peer, resolved.realPath, .read, from: server.resolver.permissionBase)
    }

    // MARK: Writing

    /// Sends a line now, without blocking: what the socket does not take waits in the outbox.
    func send(_ message: ServerMessage) {
        outbox.send(WireCodec.encode(message))
    }

    /// Sends a line with (a duplicate of) `descriptor` attached; false if the client is gone.
    @discardableResult
    func send(_ message: ServerMessage, descriptor: Int32) -> Bool {
        guard !lock.withLock({ closed }) else { return false }
        return outbox.send(WireCodec.encode(message), descriptor: descriptor)
    }
}
