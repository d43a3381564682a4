import CoordinationRuntime
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its mutable state (the record, the open content) is behind `state`.
/// A content an item had, kept — Foundation's `NSFileVersion`.
///
/// Inside a coordfs mount the mount keeps a version each time a file's content is replaced (a
/// save by rename, a truncation, a removal) and keeps it as an unresolved conflict when the
/// writer had not seen what it replaced (a lost update); outside any mount the user's daemon
/// keeps the versions programs add. Either way the store survives the program, and the same
/// versions are listed by `coordfs versions` and the Python package.
///
/// An item's versions are those of its path: `otherVersionsOfItem(at:)` lists what was at that
/// path before, whatever happened to the file since. A version's `url` reads its content for as
/// long as the version object lives (a descriptor of this process, the store itself being out
/// of reach); `replaceItem(at:)` puts it back.
public final class FileVersion: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// How `addOfItem(at:withContentsOf:options:)` takes the content.
    public struct AddingOptions: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The contents file is removed once its content is kept (Apple moves it into the store).
        public static let byMoving = AddingOptions(rawValue: 1 << 0)
    }

    /// How `replaceItem(at:options:)` puts the content back.
    public struct ReplacingOptions: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The version is removed once its content is back (Apple moves it out of the store).
        public static let byMoving = ReplacingOptions(rawValue: 1 << 0)
    }

    private static let logger = Logger(label: "org.coordfs.versions")

    /// The persistent identifier of an item's current version.
    static let currentIdentifier = "current"

    /// The item whose version this is.
    let itemURL: URL
    private let state: Mutex<State>

    private struct State: @unchecked Sendable {
        var info: VersionInfo?
        /// The version's content, open once `url` was asked for.
        var content: FileHandle?
        /// Gone from the store (`remove()`, or removed elsewhere as the news said).
        var removed = false
    }

    init(item: URL, info: VersionInfo?) {
        itemURL = item
        state = Mutex(State(info: info))
    }

    deinit {
        state.withLock { try? $0.content?.close() }
    }

    // MARK: The item's versions

    /// The item's current content as a version; nil if there is no item at `url`.
    public class func currentVersionOfItem(at url: URL) -> FileVersion? {
        let item = url.standardizedFileURL
        guard FileManager.default.fileExists(atPath: item.path) else { return nil }
        return FileVersion(item: item, info: nil)
    }

    /// Every kept version of the item at `url` but its current content, oldest first, conflicts
    /// included; nil where none can be known (no item there and none kept, or no store serves it).
    public class func otherVersionsOfItem(at url: URL) -> [FileVersion]? {
        let item = url.standardizedFileURL
        guard let listed = try? VersionsLink.versions(of: item.path) else {
            return FileManager.default.fileExists(atPath: item.path) ? [] : nil
        }
        return listed.map { FileVersion(item: item, info: $0) }
    }

    /// The item's versions kept as conflicts and not yet resolved, oldest first; nil if there is
    /// no item at `url`.
    public class func unresolvedConflictVersionsOfItem(at url: URL) -> [FileVersion]? {
        otherVersionsOfItem(at: url)?.filter { $0.isConflict && !$0.isResolved }
    }

    /// The version of the item at `url` that `persistentIdentifier` names (as a version's
    /// `persistentIdentifier` gave it), or nil.
    public class func version(itemAt url: URL, forPersistentIdentifier persistentIdentifier: Any) -> FileVersion? {
        let identifier: String
        switch persistentIdentifier {
        case let text as String: identifier = text
        case let text as NSString: identifier = text as String
        default: return nil
        }
        if identifier == currentIdentifier { return currentVersionOfItem(at: url) }
        return otherVersionsOfItem(at: url)?.first { $0.persistentIdentifier == identifier }
    }

    /// Keeps the content of the file at `contentsURL` as a new version of the item at `url`,
    /// which the item's presenters hear of (`presentedItemDidGain(_:)`). Inside a mount the
    /// mount's store keeps it, outside the user's daemon's; writing the item must be allowed.
    public class func addOfItem(
        at url: URL, withContentsOf contentsURL: URL, options: AddingOptions = []
    ) throws -> FileVersion {
        let item = url.standardizedFileURL
        let content = try FileHandle(forReadingFrom: contentsURL)
        defer { try? content.close() }
        let info = try VersionsLink.add(of: item.path, content: content.fileDescriptor)
        if options.contains(.byMoving) { try? FileManager.default.removeItem(at: contentsURL) }
        return FileVersion(item: item, info: info)
    }

    /// Removes every version of the item at `url` but its current content (those this user
    /// may remove: a version is its owner's).
    public class func removeOtherVersionsOfItem(at url: URL) throws {
        let item = url.standardizedFileURL
        let versions: [VersionInfo]
        do { versions = try VersionsLink.versions(of: item.path) } catch let error as CocoaError
            where error.code == .featureUnsupported
        {
            return  // no store serves the item: it has no other versions
        }
        for version in versions {
            try VersionsLink.remove(version.id, of: item.path)
        }
    }

    /// A new directory on the item's filesystem where possible, for writing a version's content
    /// before `addOfItem(at:withContentsOf:options:)`.
    public class func temporaryDirectoryURLForNewVersionOfItem(at url: URL) -> URL {
        let base =
            (try? FileManager.default.url(
                for: .itemReplacementDirectory, in: .userDomainMask,
                appropriateFor: url.standardizedFileURL, create: true))
        if let base { return base }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-version-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    // MARK: One version

    /// Where the version's content can be read: the item itself for the current version; for
    /// another, a path to a read-only descriptor of this process that lives as long as this
    /// object (the store is out of reach of everyone).
    public var url: URL {
        guard let id = state.withLock({ $0.info?.id }) else { return itemURL }
        if let content = state.withLock({ $0.content }) { return Self.url(of: content) }
        guard let (_, content) = try? VersionsLink.open(id, of: itemURL.path) else {
            return URL(fileURLWithPath: "/proc/self/fd/gone-version-\(id)")
        }
        let kept = state.withLock { state -> FileHandle in
            if let earlier = state.content { return earlier }
            state.content = content
            return content
        }
        if kept !== content { try? content.close() }
        return Self.url(of: kept)
    }

    private static func url(of content: FileHandle) -> URL {
        URL(fileURLWithPath: "/proc/self/fd/\(content.fileDescriptor)")
    }

    /// The item's name.
    public var localizedName: String? { itemURL.lastPathComponent }

    /// The host whose program made the version (this one, unless a host of a shared store did).
    public var localizedNameOfSavingComputer: String? {
        state.withLock { $0.info?.host } ?? ProcessInfo.processInfo.hostName
    }

    /// When the content was last modified (for the current version, the item's time now).
    public var modificationDate: Date? {
        if let info = state.withLock({ $0.info }) { return Date(timeIntervalSince1970: info.modified) }
        return (try? FileManager.default.attributesOfItem(atPath: itemURL.path))?[.modificationDate] as? Date
    }

    /// Names the version for `version(itemAt:forPersistentIdentifier:)`, in this process and others.
    public var persistentIdentifier: String { state.withLock { $0.info?.id } ?? Self.currentIdentifier }

    /// Kept because its writer replaced content it had not seen: a lost update.
    public var isConflict: Bool { state.withLock { $0.info?.conflict ?? false } }

    /// False for a conflict nobody has resolved yet. Set it once the conflict is resolved: the
    /// item's presenters hear of it, and the store's bounds may take the version (remove it
    /// when no longer useful, as Apple asks).
    public var isResolved: Bool {
        get { state.withLock { $0.info.map { !$0.conflict || $0.resolved } ?? true } }
        set {
            guard let info = state.withLock({ $0.info }), info.conflict, info.resolved != newValue else { return }
            do {
                try VersionsLink.resolve(info.id, of: itemURL.path, newValue)
                state.withLock { $0.info?.resolved = newValue }
            } catch {
                Self.logger.warning(
                    "cannot mark version \(info.id) of \(itemURL.path) \(newValue ? "resolved" : "unresolved"): \(error)"
                )
            }
        }
    }

    /// Whether the store's bounds may take the version (false: kept until removed).
    public var isDiscardable: Bool {
        get { state.withLock { !($0.info?.pinned ?? true) } }
        set {
            guard let info = state.withLock({ $0.info }), info.pinned == newValue else { return }
            do {
                try VersionsLink.pin(info.id, of: itemURL.path, !newValue)
                state.withLock { $0.info?.pinned = !newValue }
            } catch {
                Self.logger.warning("cannot change whether version \(info.id) of \(itemURL.path) is kept: \(error)")
            }
        }
    }

    /// Versions are always here: nothing is downloaded.
    public var hasLocalContents: Bool { true }
    public var hasThumbnail: Bool { false }

    /// Puts this version's content at `url` (usually its item's) as a save does: written beside
    /// it and renamed over, so that readers see the old content or the new (inside a mount the
    /// content replaced is kept as a version in turn). Returns `url`. Do it inside a coordinated
    /// write of `url`, as on Apple platforms.
    @discardableResult
    public func replaceItem(at url: URL, options: ReplacingOptions = []) throws -> URL {
        let target = url.standardizedFileURL
        guard let id = state.withLock({ $0.info?.id }) else {
            // The current version: its content is the item's already.
            if target.path != itemURL.path {
                try VersionsLink.put(try FileHandle(forReadingFrom: itemURL), at: target.path)
            }
            return target
        }
        let (_, content) = try VersionsLink.open(id, of: itemURL.path)
        defer { try? content.close() }
        try VersionsLink.put(content, at: target.path)
        if options.contains(.byMoving) { try remove() }
        return target
    }

    /// Removes the version from the store; the item's presenters hear of it. The current version
    /// cannot be removed.
    public func remove() throws {
        guard let id = state.withLock({ $0.info?.id }) else {
            throw CocoaError(
                .featureUnsupported,
                userInfo: [
                    NSLocalizedDescriptionKey: "the current version of \(itemURL.path) cannot be removed",
                    NSURLErrorKey: itemURL
                ])
        }
        if state.withLock({ $0.removed }) { return }
        try VersionsLink.remove(id, of: itemURL.path)
        state.withLock { $0.removed = true }
    }

    // MARK: Equality

    public static func == (lhs: FileVersion, rhs: FileVersion) -> Bool {
        lhs.itemURL.path == rhs.itemURL.path && lhs.persistentIdentifier == rhs.persistentIdentifier
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(itemURL.path)
        hasher.combine(persistentIdentifier)
    }

    public var description: String {
        guard let info = state.withLock({ $0.info }) else { return "current version of \(itemURL.path)" }
        let marks = info.conflict ? (info.resolved ? " (resolved conflict)" : " (conflict)") : ""
        return "version \(info.id) of \(itemURL.path), \(info.cause)\(marks)"
    }

    // MARK: News

    /// The version a presenter hears of: described by its store where it still has it.
    static func told(item: URL, id: String) -> FileVersion {
        let info = (try? VersionsLink.versions(of: item.path))?.first { $0.id == id }
        let version = FileVersion(item: item, info: info ?? VersionInfo(removed: id))
        if info == nil { version.state.withLock { $0.removed = true } }
        return version
    }
}
