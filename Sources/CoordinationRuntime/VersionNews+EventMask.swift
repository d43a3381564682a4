import Coordination
import CoordinationWire

/// Version news on the event channel, one event bit each: the server sends it (`RemotePresenter`)
/// and a client's link reads it back (`MountLink`) by this one table.
extension VersionNews {
    private static let events: [(VersionNews, EventMask)] = [
        (.gainedConflict, .conflict), (.gained, .versionAdded), (.lost, .versionRemoved), (.resolved, .conflictResolved)
    ]

    package var eventMask: EventMask { Self.events.first { $0.0 == self }!.1 }

    /// The news an event record's mask carries, if any.
    package init?(eventMask mask: EventMask) {
        guard let news = Self.events.first(where: { mask.contains($0.1) })?.0 else { return nil }
        self = news
    }
}
