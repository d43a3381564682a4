import ArgumentParser
import CoordFSMount
import CoordinationWire
import Foundation

/// `coordfs`: file coordination for Linux.
public struct CoordFS: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "coordfs",
        abstract: "File coordination for Linux: Apple's coordinator and presenter model, enforced for every program.",
        version: CoordFS.versionText,
        subcommands: [Mount.self, Unmount.self, Watch.self, Status.self, Coordinate.self, Services.self, Vend.self, Versions.self,
                      Daemon.self, Demo.self, DaemonStart.self],
        defaultSubcommand: nil
    )

    public init() {}

    static let release = "0.1.0"

    /// `--version`: the release, the protocol its sockets speak, and what this machine's kernel
    /// and libfuse give a mount.
    static var versionText: String {
        let ring: String = switch (FileManager.default.fileExists(atPath: Mount.ioUringSwitch), Mount.ioUringSwitchedOff) {
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
        if let first = rest.first, rest.count >= 2, first != "help", !first.hasPrefix("-"), !subcommands.contains(first),
           first.contains("/") || (isDirectory(first) && rest.contains("-o")) {
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
               argument.dropFirst().allSatisfy({ "sfnv".contains($0) }) {
                if argument.contains("f") { translated.append("--fake") }
                if argument.contains("v") { translated.append("--verbose") }
                continue
            }
            translated.append(argument)
        }
        return translated
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
