import ArgumentParser
import CoordinationWire
import Foundation

/// `coordfs`: file coordination for Linux.
public struct CoordFS: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "coordfs",
        abstract: "File coordination for Linux: Apple's coordinator and presenter model, enforced for every program.",
        version: "0.1.0",
        subcommands: [Mount.self, Unmount.self, Watch.self, Status.self, Coordinate.self, Services.self, Vend.self,
                      Daemon.self, Demo.self, DaemonStart.self],
        defaultSubcommand: nil
    )

    public init() {}
}

extension CoordFS {
    /// The arguments to parse. `mount(8)` runs `mount.coordfs SOURCE DIR -o OPTIONS`, and
    /// mount.fuse3 (for `-t fuse.coordfs` and fstab) runs `coordfs SOURCE DIR -o OPTIONS`: both
    /// mean `coordfs mount SOURCE DIR -o OPTIONS`.
    public static func arguments(from commandLine: [String]) -> [String] {
        let name = commandLine.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
        let rest = Array(commandLine.dropFirst())
        if name == "mount.coordfs" || name == "mount.fuse.coordfs" { return ["mount"] + rest }
        let subcommands = Set(configuration.subcommands.map { $0._commandName })
        if let first = rest.first, !first.hasPrefix("-"), !subcommands.contains(first), rest.count >= 2 {
            return ["mount"] + rest
        }
        return rest
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
