import CoordFSCommands

CoordFS.main(CoordFS.arguments(from: CommandLine.arguments))
