/// Options of a coordinated read. Raw values are Apple's (rule O10).
public struct ReadingOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Do not ask presenters to save first (O1).
    public static let withoutChanges = ReadingOptions(rawValue: 1)
    /// Coordinate the target of a symbolic link (O2).
    public static let resolvesSymbolicLink = ReadingOptions(rawValue: 2)
    /// Ask no presenter anything; wait only for deleting, moving or replacing writes (O3).
    public static let immediatelyAvailableMetadataOnly = ReadingOptions(rawValue: 4)
    /// Hand the accessor a snapshot taken under coordination (O4).
    public static let forUploading = ReadingOptions(rawValue: 8)

    // coordfs's own (not Apple's), set by a mount only:

    /// A read through a descriptor an unmodified program opened through a mount: it reads the
    /// inode it opened, whatever becomes of the item's name (`WritingOptions.passesOpenReads`).
    package static let throughOpenFile = ReadingOptions(rawValue: 1 << 16)
}

/// Options of a coordinated write. Raw values are Apple's; a write carries at most one (O10).
public struct WritingOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    public static let forDeleting = WritingOptions(rawValue: 1)
    public static let forMoving = WritingOptions(rawValue: 2)
    public static let forMerging = WritingOptions(rawValue: 4)
    public static let forReplacing = WritingOptions(rawValue: 8)
    public static let contentIndependentMetadataOnly = WritingOptions(rawValue: 16)

    // coordfs's own, for files opened by unmodified programs through a mount (not Apple's):

    /// A write that only appends (`O_APPEND` without `O_TRUNC`): it changes no byte anyone has
    /// read, so readers (who see a prefix) and other appenders share the item with it (U1).
    public static let appendingOnly = WritingOptions(rawValue: 1 << 16)
    /// A write in place by a program that shares the file read-write with others of its kind
    /// (`O_RDWR`/`O_WRONLY` without `O_TRUNC`: databases, mailboxes, fio): such writers, and
    /// appenders, share the item, and keep each other in order with their own locks; readers
    /// still wait for them (U2).
    public static let sharingWriters = WritingOptions(rawValue: 1 << 17)
    /// A write that removes the item's local content while its name stays, as a sync client
    /// that keeps files on demand evicts a downloaded one (Apple's `evictUbiquitousItem(at:)`):
    /// its presenters, and those inside a directory, are asked to accommodate the eviction and
    /// may refuse it (P33). Like a deletion, on a directory it covers everything inside.
    public static let forEvicting = WritingOptions(rawValue: 1 << 18)

    // Marks a mount sets beside a write's option, for a change it makes in one call for an
    // unmodified program (docs/mount.md, the kernel's locks). Nobody asks for them: the
    // control socket knows them by no name.

    /// A change that reads through open descriptors outlive: a name change (a descriptor keeps
    /// its inode and every byte of it) or a log's rotation (its readers read a prefix already,
    /// U1). It does not wait for `ReadingOptions.throughOpenFile` reads, nor they for it.
    package static let passesOpenReads = WritingOptions(rawValue: 1 << 19)
    /// A change that leaves appenders appending: a move (the descriptor keeps its inode) or a
    /// log's truncation (an `O_APPEND` write lands at the new end). It does not wait for
    /// `appendingOnly` writes, nor they for it.
    package static let passesAppends = WritingOptions(rawValue: 1 << 20)

    static let known: WritingOptions = [
        .forDeleting, .forMoving, .forMerging, .forReplacing,
        .contentIndependentMetadataOnly, .appendingOnly, .sharingWriters, .forEvicting,
        .passesOpenReads, .passesAppends
    ]
    /// The marks: a write carries at most one option besides them (O10).
    static let marks: WritingOptions = [.passesOpenReads, .passesAppends]
    /// The options whose write on a directory covers everything inside it (C19).
    static let destructive: WritingOptions = [.forDeleting, .forMoving, .forReplacing, .forEvicting]

    /// True when at most one known option is set besides the marks, and no unknown bit is.
    public var isValid: Bool {
        let option = rawValue & ~WritingOptions.marks.rawValue
        return rawValue & ~WritingOptions.known.rawValue == 0 && option & (option &- 1) == 0
    }
}

/// What an intent does to its item.
public enum AccessKind: Hashable, Sendable {
    case reading(ReadingOptions)
    case writing(WritingOptions)

    public var isWrite: Bool { if case .writing = self { return true } else { return false } }

    var writingOptions: WritingOptions {
        if case .writing(let options) = self { return options } else { return [] }
    }
    var readingOptions: ReadingOptions {
        if case .reading(let options) = self { return options } else { return [] }
    }
}

/// The facts about an item the engine needs and may not find out itself (that would be I/O).
public struct AccessTarget: Hashable, Sendable {
    /// The item, canonical.
    public var path: ItemPath
    /// Whether the item is (or, for a creation, will be) a directory.
    public var isDirectory: Bool
    /// File packages strictly enclosing the item, outermost first (C17, P16).
    public var enclosingPackages: [ItemPath]
    /// Whether the item is itself a file package.
    public var isPackage: Bool

    public init(
        path: ItemPath, isDirectory: Bool = false, isPackage: Bool = false,
        enclosingPackages: [ItemPath] = []
    ) {
        self.path = path
        self.isDirectory = isDirectory || isPackage
        self.isPackage = isPackage
        self.enclosingPackages = enclosingPackages
    }
}

/// One read or write of one item.
public struct Intent: Hashable, Sendable {
    public var target: AccessTarget
    public var kind: AccessKind

    public init(_ kind: AccessKind, _ target: AccessTarget) {
        self.kind = kind
        self.target = target
    }

    public static func read(_ path: ItemPath, _ options: ReadingOptions = []) -> Intent {
        Intent(.reading(options), AccessTarget(path: path))
    }
    public static func write(_ path: ItemPath, _ options: WritingOptions = []) -> Intent {
        Intent(.writing(options), AccessTarget(path: path))
    }

    public var path: ItemPath { target.path }

    /// Whether the intent is well formed (`validationProblem` is nil), without making the
    /// message: a grant's fast path asks only this.
    var isValid: Bool {
        if case .writing(let options) = kind { return options.isValid }
        return true
    }

    var validationProblem: String? {
        if case .writing(let options) = kind, !options.isValid {
            return "a write carries at most one writing option (raw value \(options.rawValue))"
        }
        return nil
    }
}

extension ReadingOptions {
    /// The options as Apple names them: what the control socket takes and `coordfs status` shows.
    public static let named: [(ReadingOptions, String)] = [
        (.withoutChanges, "withoutChanges"), (.resolvesSymbolicLink, "resolvesSymbolicLink"),
        (.immediatelyAvailableMetadataOnly, "immediatelyAvailableMetadataOnly"), (.forUploading, "forUploading")
    ]

    /// The names of the options this set holds, in `named`'s order.
    public var names: [String] { Self.named.filter { contains($0.0) }.map(\.1) }
}

extension WritingOptions {
    /// Apple's options, and `forEvicting`, by their names (the options of unmodified programs'
    /// opens through a mount have none: nobody asks for them).
    public static let named: [(WritingOptions, String)] = [
        (.forDeleting, "forDeleting"), (.forMoving, "forMoving"), (.forMerging, "forMerging"),
        (.forReplacing, "forReplacing"), (.contentIndependentMetadataOnly, "contentIndependentMetadataOnly"),
        (.forEvicting, "forEvicting")
    ]

    /// The names of the named options this set holds, in `named`'s order.
    public var names: [String] { Self.named.filter { contains($0.0) }.map(\.1) }
}
