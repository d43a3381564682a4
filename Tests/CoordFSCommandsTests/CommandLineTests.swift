@testable import CoordFSCommands
import Testing

/// A first word that names no subcommand, as `coordfs` answers it.
@Suite struct CommandLineTests {
    @Test func aMistypedSubcommandIsNamedWithTheNearest() {
        #expect(CoordFS.unknownSubcommand(["stats", "/mnt"]) == "Unknown subcommand 'stats'. Did you mean 'status'?")
        // Of two as near, the one that begins as the word does.
        #expect(CoordFS.unknownSubcommand(["umount", "/mnt"]) == "Unknown subcommand 'umount'. Did you mean 'unmount'?")
        #expect(CoordFS.unknownSubcommand(["serivces"]) == "Unknown subcommand 'serivces'. Did you mean 'services'?")
        #expect(CoordFS.unknownSubcommand(["coord"]) == "Unknown subcommand 'coord'. Did you mean 'coordinate'?")
        #expect(
            CoordFS.unknownSubcommand(["xyzzy"])?.hasPrefix(
                "Unknown subcommand 'xyzzy'. The subcommands: mount, unmount, watch") == true)
        // The hidden one is never offered, nor listed.
        let hidden = CoordFS.unknownSubcommand(["daemon-strat"]) ?? ""
        #expect(
            hidden.hasPrefix("Unknown subcommand 'daemon-strat'. The subcommands: ")
                && !hidden.contains("daemon-start"), "\(hidden)")
    }

    @Test func subcommandsOptionsAndHelpPass() {
        for arguments in [["status"], ["watch", "x"], ["help", "watch"], ["--version"], ["-h"], [], ["daemon-start"]] {
            #expect(CoordFS.unknownSubcommand(arguments) == nil, "\(arguments)")
        }
    }

    @Test func editDistanceCountsInsertionsDeletionsAndSubstitutions() {
        #expect(CoordFS.editDistance("status", "status") == 0)
        #expect(CoordFS.editDistance("stats", "status") == 1)
        #expect(CoordFS.editDistance("wtach", "watch") == 2)
        #expect(CoordFS.editDistance("", "vend") == 4)
        #expect(CoordFS.editDistance("mount", "") == 5)
    }

    @Test func logLevelsAreSyslogSeverities() {
        #expect(
            SystemLog.severity(.critical) == 2 && SystemLog.severity(.error) == 3 && SystemLog.severity(.warning) == 4)
        #expect(SystemLog.severity(.notice) == 5 && SystemLog.severity(.info) == 6 && SystemLog.severity(.debug) == 7)
    }
}
