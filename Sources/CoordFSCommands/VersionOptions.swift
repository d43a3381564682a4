import ArgumentParser
import FileVersions
import Foundation

/// The options that say what a mount keeps of content it replaces (docs/versions.md), as
/// `coordfs mount` takes them; each over the profile's key of the same name.
struct VersionOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "keep (a file's content is kept as a version before a rename over it, its last unlink or its truncation, and a lost update's as a conflict, told to presenters; the default), refuse (the same, and a write replacing content its writer never read fails with ESTALE) or off.",
            valueName: "keep|refuse|off"))
    var versions: VersionPolicy?

    @Option(
        help: ArgumentHelp(
            "Who counts as one reader and writer when a write is checked against earlier reads: session (a terminal, an agent and the commands it runs; the default), process-group, process or user.",
            valueName: "who"))
    var versionReaders: ReaderIdentity?

    @Option(help: ArgumentHelp("Versions kept of one item (default 32).", valueName: "n"))
    var versionsPerItem: Int?

    @Option(help: ArgumentHelp("Bytes of versions kept in all, with K, M, G or T (default 1G).", valueName: "size"))
    var versionsTotal: String?

    @Option(help: ArgumentHelp("Days a version is kept (default 30).", valueName: "days"))
    var versionsAge: Double?

    @Option(
        help: ArgumentHelp(
            "Largest file copied to be kept before a truncation, with K, M, G or T (default 64M; a filesystem with reflinks copies nothing and has no bound). Larger ones are not kept, which is logged.",
            valueName: "size"))
    var versionCopyLimit: String?

    func setting(over profile: Profile?) throws -> VersionSettings {
        var setting = VersionSettings()
        setting.policy = versions ?? profile?.versionPolicy ?? .keep
        setting.rules = profile?.versionRules ?? []
        setting.readers = versionReaders ?? profile?.versionReaders ?? .session
        if let count = versionsPerItem ?? profile?.versionsPerItem {
            guard count >= 1 else { throw CommandFailure("--versions-per-item must be at least 1") }
            setting.limits.perItem = count
        }
        if let text = versionsTotal ?? profile?.versionsTotal {
            guard let bytes = Self.bytes(text) else {
                throw CommandFailure("--versions-total must be a size such as 512M or 2G, not '\(text)'")
            }
            setting.limits.totalBytes = bytes
        }
        if let days = versionsAge ?? profile?.versionsAge {
            guard days > 0 && days <= 36_500 else {
                throw CommandFailure("--versions-age must be from 0 to 36500 days")
            }
            setting.limits.maximumAge = days * 86_400
        }
        if let text = versionCopyLimit ?? profile?.versionCopyLimit {
            guard let bytes = Self.bytes(text) else {
                throw CommandFailure("--version-copy-limit must be a size such as 64M, not '\(text)'")
            }
            setting.limits.copyLimit = bytes
        }
        return setting
    }

    /// A size: bytes, or a number with K, M, G or T (powers of 1024).
    static func bytes(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var digits = text.uppercased()
        var unit: Int64 = 1
        if let last = digits.last, let scale = units[last] { unit = scale; digits.removeLast() }
        guard let value = Double(digits), value >= 0, value * Double(unit) < Double(Int64.max) else { return nil }
        return Int64(value * Double(unit))
    }
}

extension VersionPolicy: ExpressibleByArgument {}
extension ReaderIdentity: ExpressibleByArgument {}
