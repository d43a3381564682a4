import ArgumentParser
import CoordFSMount
import CoordinationWire
import Foundation

/// `coordfs`: file coordination for Linux.
public struct CoordFS: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "coordfs",
        abstract: "File coordination for Linux: Apple's coordinator and presenter model, enforced for every program.",
        discussion: """
            Exit status: each subcommand's, on its page; 0 for --help and --version; 64 for a command \
            line it cannot take (an unknown subcommand or option, a missing or malformed argument), \
            with what it did not take and, for a mistyped name, the nearest one.
            """,
        version: CoordFS.versionText,
        subcommands: [
            Mount.self, Unmount.self, Watch.self, Status.self, Coordinate.self, Services.self, Vend.self, Versions.self,
            Daemon.self, Demo.self, DaemonStart.self
        ],
        defaultSubcommand: nil
    )

    public init() {}

    static let release = "0.1.0"

    /// `--version`: the release, the protocol its sockets speak, and what this machine's kernel
    /// and libfuse give a mount.
    static var versionText: String {
        let ring: String =
            switch (FileManager.default.fileExists(atPath: Mount.ioUringSwitch), Mount.ioUringSwitchedOff) {
            case (false, _): "not in this kernel"
            case (true, true): "switched off (echo Y > \(Mount.ioUringSwitch))"
            case (true, false): "available"
            }
        return """
            coordfs \(release)
            control socket protocol \(WireProtocol.version)
            libfuse \(MountSession.libfuseVersion), FUSE over io_uring: \(ring)
            """
    }
}

extension CoordFS {
    /// The arguments to parse. `mount(8)` runs `mount.coordfs SOURCE DIR [-sfnv] [-o OPTIONS]`,
    /// and mount.fuse3 (for `-t fuse.coordfs` and fstab) runs `coordfs SOURCE DIR -o OPTIONS`:
    /// both mean `coordfs mount SOURCE DIR -o OPTIONS`. The second form is taken only where
    /// SOURCE is a path (it has a `/`), or an existing directory with `-o` options following:
    /// `coordfs help watch` asks for help, and a mistyped subcommand (`coordfs stats M`) is an
    /// unknown subcommand, never a mount.
    public static func arguments(from commandLine: [String]) -> [String] {
        let name = commandLine.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
        let rest = Array(commandLine.dropFirst())
        if name == "mount.coordfs" || name == "mount.fuse.coordfs" { return ["mount"] + mountHelperArguments(rest) }
        let subcommands = Set(configuration.subcommands.map { $0._commandName })
        if let first = rest.first, rest.count >= 2, first != "help", !first.hasPrefix("-"),
            !subcommands.contains(first),
            first.contains("/") || (isDirectory(first) && rest.contains("-o"))
        {
            return ["mount"] + rest
        }
        return rest
    }

    /// mount(8)'s flags for a helper, as it means them (`mount.coordfs SOURCE DIR -sfnv -o OPTS
    /// -t TYPE -N NS`): `-f` fakes (everything is checked, nothing mounted), `-v` is verbose,
    /// `-n` (no /etc/mtab) and `-s` (sloppy) have nothing to change here, and `-t` and `-N` are
    /// mount(8)'s own. (`coordfs mount`'s own `-f` and `-s` mean foreground and one thread.)
    static func mountHelperArguments(_ arguments: [String]) -> [String] {
        var translated: [String] = []
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            index += 1
            if argument == "-t" || argument == "-N" { index += 1; continue }
            if argument.hasPrefix("-"), !argument.hasPrefix("--"), argument.count > 1, argument != "-o",
                argument.dropFirst().allSatisfy({ "sfnv".contains($0) })
            {
                if argument.contains("f") { translated.append("--fake") }
                if argument.contains("v") { translated.append("--verbose") }
                continue
            }
            translated.append(argument)
        }
        return translated
    }

    /// Parses and runs `commandLine` (`CommandLine.arguments`, with the name it was run by):
    /// as `arguments(from:)` reads it, and a first word that names no subcommand is a usage
    /// error naming the nearest one, as swift-argument-parser names the nearest option.
    public static func main(commandLine: [String]) {
        let arguments = arguments(from: commandLine)
        if let unknown = unknownSubcommand(arguments) { Self.exit(withError: ValidationError(unknown)) }
        Self.main(arguments)
    }

    /// What to say of `arguments`' first word when it is no subcommand (and no option); nil
    /// when it is one.
    static func unknownSubcommand(_ arguments: [String]) -> String? {
        guard let word = arguments.first, !word.hasPrefix("-"), word != "help",
            !configuration.subcommands.contains(where: { $0._commandName == word })
        else { return nil }
        let shown = configuration.subcommands.filter { $0.configuration.shouldDisplay }.map { $0._commandName }
        // Of names as near, one with the word's first letter: `umount` is `unmount`, not `mount`.
        func rank(_ name: String) -> (Int, Int) { (editDistance(word, name), name.first == word.first ? 0 : 1) }
        let nearest = shown.map { (name: $0, distance: rank($0).0) }.min { rank($0.name) < rank($1.name) }
        if let nearest, nearest.distance < min(4, word.count) {
            return "Unknown subcommand '\(word)'. Did you mean '\(nearest.name)'?"
        }
        if word.count >= 3, let started = shown.first(where: { $0.hasPrefix(word) }) {
            return "Unknown subcommand '\(word)'. Did you mean '\(started)'?"
        }
        return "Unknown subcommand '\(word)'. The subcommands: \(shown.joined(separator: ", "))"
    }

    /// Levenshtein's distance between `a` and `b`: the fewest insertions, deletions and
    /// substitutions of characters that make one the other.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

/// A command that could not do its work: printed as one line, `Error: …`, exit status 1 — no
/// usage text, since the arguments were fine.
struct CommandFailure: Error, CustomStringConvertible, LocalizedError {
    let description: String
    init(_ description: String) { self.description = description }
    var errorDescription: String? { description }
}

extension Seconds {
    /// `value` seconds given as `option`, or a one-line refusal naming it.
    static func duration(_ value: Double, option: String) throws -> Duration {
        switch duration(value) {
        case .success(let duration): return duration
        case .failure(let why): throw CommandFailure("\(option): \(why)")
        }
    }
}
