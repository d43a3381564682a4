import CoordFSCommands

CoordFS.main()
