import CoordFSCommands

CoordFS.main(commandLine: CommandLine.arguments)
