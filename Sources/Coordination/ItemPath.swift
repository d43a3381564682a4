/// An item named by an absolute, lexically normal path: it starts with `/`, has no empty, `.` or
/// `..` components and no trailing slash (the root is `/`).
///
/// The engine compares items only by this value (rule C26). Resolving symbolic links is I/O and
/// belongs to the caller; the engine only normalises spelling.
///
/// Paths are byte strings, as Linux names are: two spellings of one character in different
/// Unicode normal forms are two items. Each path carries its hash, made once: the engine looks a
/// path up several times per access.
public struct ItemPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The canonical spelling.
    public let string: String
    /// FNV-1a over the bytes of `string`; a prefix's hash is the running value at its end.
    let hashCode: Int

    /// The root directory.
    public static let root = ItemPath(uncheckedCanonical: "/")

    /// Normalises `path` lexically (`//`, `.`, `..`). Returns nil for a relative or empty path.
    public init?(_ path: String) {
        guard path.utf8.first == UInt8(ascii: "/") else { return nil }
        if ItemPath.isCanonical(path) {
            self.init(uncheckedCanonical: path)
            return
        }
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
            parts.append(part)
        }
        self.init(uncheckedCanonical: parts.isEmpty ? "/" : "/" + parts.joined(separator: "/"))
    }

    /// A path its maker spells canonically already (a mount joins the kernel's names, which are
    /// single components and never `.` or `..`): taken as it is, unchecked in release builds.
    public init(canonical path: String) {
        assert(path.utf8.first == UInt8(ascii: "/") && Self.isCanonical(path), "not a canonical path: \(path)")
        self.init(uncheckedCanonical: path)
    }

    init(uncheckedCanonical: String) {
        self.string = uncheckedCanonical
        self.hashCode = Self.fnv1a(uncheckedCanonical)
    }

    private init(uncheckedCanonical: String, hashCode: Int) {
        self.string = uncheckedCanonical
        self.hashCode = hashCode
    }

    /// FNV-1a over the bytes: a fraction of the cost of hashing the `String` (the dictionaries
    /// still mix it with their per-process seed).
    private static func fnv1a(_ string: String) -> Int {
        string.withBorrowedUTF8 { bytes in
            var hash = fnvBasis
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* fnvPrime }
            return Int(truncatingIfNeeded: hash)
        }
    }

    private static let fnvBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    private static let fnvPrime: UInt64 = 0x100_0000_01b3

    /// Calls `body` with the hash and the spelling of each strict ancestor but the root,
    /// outermost first, until it returns false. Each spelling is a prefix of this path's bytes:
    /// nothing is allocated, and finding the presenters above an item runs on every access.
    func forEachAncestorPrefix(_ body: (_ hash: Int, _ spelling: UnsafeBufferPointer<UInt8>) -> Bool) {
        string.withBorrowedUTF8 { bytes in
            var hash = Self.fnvBasis
            for (offset, byte) in bytes.enumerated() {
                if byte == UInt8(ascii: "/") && offset > 0
                    && !body(Int(truncatingIfNeeded: hash), UnsafeBufferPointer(rebasing: bytes[..<offset]))
                {
                    return
                }
                hash = (hash ^ UInt64(byte)) &* Self.fnvPrime
            }
        }
    }

    /// Whether `self` is spelled `bytes`.
    func isSpelled(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        string.withBorrowedUTF8 { Self.sameBytes($0, bytes) }
    }

    public static func == (lhs: ItemPath, rhs: ItemPath) -> Bool {
        guard lhs.hashCode == rhs.hashCode else { return false }
        return lhs.string.withBorrowedUTF8 { a in rhs.string.withBorrowedUTF8 { b in sameBytes(a, b) } }
    }

    /// Eight bytes at a time: paths are compared on every lookup of the engine's tables.
    private static func sameBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let left = a.baseAddress, let right = b.baseAddress, left != right else { return true }
        var offset = 0
        while offset + 8 <= a.count {
            if UnsafeRawPointer(left).loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                != UnsafeRawPointer(right).loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            {
                return false
            }
            offset += 8
        }
        while offset < a.count {
            if left[offset] != right[offset] { return false }
            offset += 1
        }
        return true
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(hashCode) }

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

    /// `self` with `name` appended: one component, or several joined by single slashes, none of
    /// them empty, `.` or `..` (it is not checked).
    public func appending(_ name: some StringProtocol) -> ItemPath {
        appending(String(name))
    }

    /// `appending` for a `String`, the mount's per-request case: one allocation, and the hash
    /// goes on from this path's instead of starting over (FNV-1a runs byte by byte).
    public func appending(_ name: String) -> ItemPath {
        let slash = UInt8(ascii: "/")
        // The root's slash is the separator already.
        let separator = isRoot ? 0 : 1
        var hash = UInt64(UInt(bitPattern: hashCode))
        if separator == 1 { hash = (hash ^ UInt64(slash)) &* Self.fnvPrime }
        // Joined on the stack and made a String from there: the same library path as the
        // kernel's names take (`String(cString:)`), where `String(unsafeUninitializedCapacity:)`
        // runs code of its own, and thunks for its closure, on every request.
        let joined = string.withBorrowedUTF8 { head in
            name.withBorrowedUTF8 { tail in
                let count = head.count + separator + tail.count
                return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count) { buffer in
                    _ = buffer.initialize(fromContentsOf: head)
                    if separator == 1 { buffer[head.count] = slash }
                    _ = UnsafeMutableBufferPointer(rebasing: buffer[(head.count + separator)...]).initialize(
                        fromContentsOf: tail)
                    for byte in tail { hash = (hash ^ UInt64(byte)) &* Self.fnvPrime }
                    return String(decoding: buffer, as: UTF8.self)
                }
            }
        }
        return ItemPath(uncheckedCanonical: joined, hashCode: Int(truncatingIfNeeded: hash))
    }

    /// Where `self` lands when `old` (itself or an ancestor of `self`) moves to `new`; nil when
    /// `self` is not `old` nor inside it.
    public func relocated(from old: ItemPath, to new: ItemPath) -> ItemPath? {
        if self == old { return new }
        guard old.isAncestor(of: self) else { return nil }
        let suffix = old.isRoot ? string.dropFirst() : string.dropFirst(old.string.utf8.count + 1)
        return new.appending(suffix)
    }

    /// Byte order, consistent with `==`.
    public static func < (lhs: ItemPath, rhs: ItemPath) -> Bool {
        lhs.string.utf8.lexicographicallyPrecedes(rhs.string.utf8)
    }
}

extension String {
    /// The UTF-8 bytes, borrowed: no copy of the string and no retain of its storage, which
    /// `withUTF8` on a `var` copy costs. Native strings are contiguous; the copy is a fallback.
    @inlinable @inline(__always)
    package func withBorrowedUTF8<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        if let result = utf8.withContiguousStorageIfAvailable(body) { return result }
        var copy = self
        return copy.withUTF8(body)
    }
}
