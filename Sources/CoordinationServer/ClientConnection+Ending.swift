import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The end of a connection, and of everything its client had.
extension ClientConnection {
    /// Shuts the socket down (its reader then ends the connection), unless the connection has
    /// closed it already. (Unguarded, a server stopping would shut down whatever new socket, of
    /// another client or of another part of the process, took the number of a connection that
    /// closed meanwhile.)
    func shutDown() {
        lock.withLock { if !descriptorClosed { _ = shutdown(fd, Int32(SHUT_RDWR)) } }
    }

    /// Ends everything the client had: watches go, holds end, pending holds are cancelled, and
    /// requests it never answered count as consent. Once only: the descriptor and the user's
    /// connection are given back here.
    func close() {
        let taken = lock.withLock {
            () -> (
                [RemotePresenter], [Held], [CoordinatedAccess], [@Sendable (Int32) -> Void], Set<ServiceRegistrationID>,
                [@Sendable () -> Void]
            )? in
            if closed { return nil }
            closed = true
            defer {
                watches = [:]; holds = [:]; pendingHolds = [:]; pendingAdmissions = [:]; answers = [:];
                inheritingHolds = []; vended = []
            }
            return (
                Array(watches.values), Array(holds.values), Array(pendingHolds.values), answers.values.map(\.answered),
                vended,
                Array(pendingAdmissions.values)
            )
        }
        guard let (presenters, claims, pending, unanswered, services, admissions) = taken else { return }
        for stop in admissions { stop() }
        for service in services {
            server.domain.engine.withdrawService(service)
            server.setProvider(nil, for: service)
        }
        updateInheritance()
        server.domain.unregister(keys: presenters.map(ObjectIdentifier.init))
        server.counts.returnWatches(presenters.count, of: peer.uid)
        for claim in pending { claim.cancel() }
        for held in claims { end(held, changed: false) }
        for answered in unanswered { answered(0) }
        outbox.close(grace: .seconds(1))  // a last error line still goes out
        lock.withLock {
            descriptorClosed = true
            shutdown(fd, Int32(SHUT_RDWR))
            Glibc.close(fd)
        }
        server.counts.returnConnection(of: peer.uid)
        server.forget(self)
    }
}
