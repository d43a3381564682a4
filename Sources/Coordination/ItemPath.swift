/// An item named by an absolute, lexically normal path: it starts with `/`, has no empty, `.` or
/// `..` components and no trailing slash (the root is `/`).
///
/// The engine compares items only by this value (rule C26). Resolving symbolic links is I/O and
/// belongs to the caller; the engine only normalises spelling.
public struct ItemPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The canonical spelling.
    public let string: String

    /// The root directory.
    public static let root = ItemPath(uncheckedCanonical: "/")

    /// Normalises `path` lexically (`//`, `.`, `..`). Returns nil for a relative or empty path.
    public init?(_ path: String) {
        guard path.utf8.first == UInt8(ascii: "/") else { return nil }
        if ItemPath.isCanonical(path) {
            self.string = path
            return
        }
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
            parts.append(part)
        }
        self.string = parts.isEmpty ? "/" : "/" + parts.joined(separator: "/")
    }

    init(uncheckedCanonical: String) { self.string = uncheckedCanonical }

    private static func isCanonical(_ path: String) -> Bool {
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        var previousSlash = false
        var componentLength = 0, dotsOnly = true
        for byte in path.utf8 {
            if byte == slash {
                if previousSlash { return false }
                if componentLength > 0 && dotsOnly && componentLength <= 2 { return false }
                previousSlash = true; componentLength = 0; dotsOnly = true
            } else {
                previousSlash = false; componentLength += 1
                if byte != dot { dotsOnly = false }
            }
        }
        if componentLength > 0 && dotsOnly && componentLength <= 2 { return false }
        return !previousSlash || path.utf8.count == 1
    }

    public var description: String { string }

    public var isRoot: Bool { string.utf8.count == 1 }

    /// The last component ("" for the root).
    public var lastComponent: Substring {
        guard let slash = string.utf8.lastIndex(of: UInt8(ascii: "/")) else { return Substring(string) }
        return string[string.index(after: slash)...]
    }

    /// The parent directory, or nil for the root.
    public var parent: ItemPath? {
        if isRoot { return nil }
        let slash = string.utf8.lastIndex(of: UInt8(ascii: "/"))!
        if slash == string.startIndex { return .root }
        return ItemPath(uncheckedCanonical: String(string[..<slash]))
    }

    /// Every strict ancestor, nearest first, ending with the root.
    public var ancestors: [ItemPath] {
        var result: [ItemPath] = []
        var current = parent
        while let path = current { result.append(path); current = path.parent }
        return result
    }

    /// The components below the root.
    public var components: [Substring] { string.split(separator: "/") }

    /// True when `self` is a strict ancestor of `other`.
    public func isAncestor(of other: ItemPath) -> Bool {
        if isRoot { return !other.isRoot }
        let mine = string.utf8, theirs = other.string.utf8
        guard theirs.count > mine.count, theirs.starts(with: mine) else { return false }
        return theirs[theirs.index(theirs.startIndex, offsetBy: mine.count)] == UInt8(ascii: "/")
    }

    /// True when `self` is `other` or inside it.
    public func isSameOrInside(_ other: ItemPath) -> Bool { self == other || other.isAncestor(of: self) }

    /// `self` with `name` appended (`name` must be one component).
    public func appending(_ name: some StringProtocol) -> ItemPath {
        ItemPath(uncheckedCanonical: isRoot ? "/" + name : string + "/" + name)
    }

    /// Where `self` lands when `old` (itself or an ancestor of `self`) moves to `new`; nil when
    /// `self` is not `old` nor inside it.
    public func relocated(from old: ItemPath, to new: ItemPath) -> ItemPath? {
        if self == old { return new }
        guard old.isAncestor(of: self) else { return nil }
        let suffix = old.isRoot ? string.dropFirst() : string.dropFirst(old.string.utf8.count + 1)
        return new.appending(suffix)
    }

    public static func < (lhs: ItemPath, rhs: ItemPath) -> Bool { lhs.string < rhs.string }
}
