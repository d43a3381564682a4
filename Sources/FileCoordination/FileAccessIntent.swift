import Coordination
import CoordinationRuntime
import Foundation

// @unchecked Sendable: its URL is behind `lock`.
/// One read or write of one item in `coordinate(with:queue:byAccessor:)`: Foundation's
/// `NSFileAccessIntent`. Its `url` follows moves of the item made while the call waited (C11).
public final class FileAccessIntent: @unchecked Sendable {
    private let lock = NSLock()
    private var currentURL: URL
    let kind: AccessKind

    private init(url: URL, kind: AccessKind) {
        self.currentURL = url
        self.kind = kind
    }

    /// A reading intent.
    public static func readingIntent(with url: URL, options: FileCoordinator.ReadingOptions = []) -> FileAccessIntent {
        FileAccessIntent(url: url, kind: .reading(options))
    }

    /// A writing intent.
    public static func writingIntent(with url: URL, options: FileCoordinator.WritingOptions = []) -> FileAccessIntent {
        FileAccessIntent(url: url, kind: .writing(options))
    }

    /// The item's URL; once access is granted, the location to use.
    public var url: URL {
        get { lock.lock(); defer { lock.unlock() }; return currentURL }
    }

    func update(url: URL) {
        lock.lock(); currentURL = url; lock.unlock()
    }

    /// Whether this intent reads.
    public var isReading: Bool { !kind.isWrite }
}
