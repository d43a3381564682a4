/// A number of seconds given by a client or on a command line, as a `Duration`.
///
/// Every timeout that crosses the socket or the command line comes through here: a value
/// that does not fit (NaN, an infinity, a negative, or past `maximum`) is refused with a
/// message, never converted — `Duration.milliseconds(Int64(1e16 * 1000))` traps, and one
/// line on the socket would take a shared mount down with it.
public enum Seconds {
    /// About 31 years: far past any wait a person means, and far inside what `Duration` holds.
    public static let maximum: Double = 1e9

    /// `value` seconds, or why it is not a timeout.
    public static func duration(_ value: Double) -> Result<Duration, SecondsError> {
        guard value.isFinite else { return .failure(SecondsError("\(value) is not a number of seconds")) }
        guard value >= 0 else { return .failure(SecondsError("\(value) is negative")) }
        guard value <= maximum else { return .failure(SecondsError("\(value) is more than \(Int(maximum)) seconds")) }
        return .success(.nanoseconds(Int64((value * 1e9).rounded())))
    }
}

/// Why a number is not a timeout.
public struct SecondsError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ description: String) { self.description = description }
}
