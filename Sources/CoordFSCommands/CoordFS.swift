import ArgumentParser

/// `coordfs`: file coordination for Linux.
public struct CoordFS: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "coordfs",
        abstract: "File coordination for Linux: Apple's coordinator and presenter model, enforced for every program.",
        version: "0.1.0",
        subcommands: [Mount.self, Unmount.self, Demo.self, DaemonStart.self],
        defaultSubcommand: nil
    )

    public init() {}
}
