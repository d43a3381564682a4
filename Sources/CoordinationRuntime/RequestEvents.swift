import Coordination
import CoordinationWire

/// The engine's requests as the control socket's events name them: one table for the server
/// that asks watches, the link that hears a server ask, and the log.
extension PresenterRequest {
    /// The event bit a watch is asked with.
    package var event: EventMask {
        switch self {
        case .relinquishToReader: .relinquishToReader
        case .relinquishToWriter: .relinquishToWriter
        case .saveChanges: .save
        case .accommodateDeletion: .accommodateDeletion
        case .accommodateSubitemDeletion: .accommodateSubitemDeletion
        case .accommodateEviction: .accommodateEviction
        }
    }

    /// The request an event asks (its item at `path`); nil for an event that asks nothing.
    package init?(event mask: EventMask, path: ItemPath) {
        if mask.contains(.relinquishToWriter) {
            self = .relinquishToWriter
        } else if mask.contains(.relinquishToReader) {
            self = .relinquishToReader
        } else if mask.contains(.save) {
            self = .saveChanges
        } else if mask.contains(.accommodateDeletion) {
            self = .accommodateDeletion
        } else if mask.contains(.accommodateSubitemDeletion) {
            self = .accommodateSubitemDeletion(path)
        } else if mask.contains(.accommodateEviction) {
            self = .accommodateEviction
        } else {
            return nil
        }
    }

    /// As the log names it: the event a watch gets, and the Swift name ("SAVE (saveChanges)").
    package var logName: String {
        let event = EventMask.names.first { $0.1 == self.event }?.0 ?? "\(self.event.rawValue)"
        switch self {
        case .accommodateSubitemDeletion(let path): return "\(event) of \(path) (accommodateSubitemDeletion)"
        default: return "\(event) (\(self))"
        }
    }
}
