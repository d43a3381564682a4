import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A coordfs mount exported over NFS: NFS-Ganesha (a user-space NFS server, whose VFS backend
/// reaches files by the exported filesystem's file handles, as the kernel's nfsd does) serves
/// the mount on loopback, and libnfs's tools read and write through it. The NFS server is one
/// more coordinated process: a presenter hears its writes.
@Suite(.serialized) struct NFSReexportTests {
    static let server = "/usr/bin/ganesha.nfsd"
    static let tools = ["/usr/bin/nfs-ls", "/usr/bin/nfs-cat", "/usr/bin/nfs-cp"]
    static var available: Bool {
        ([server] + tools).allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    @Test(.enabled(if: available, "needs nfs-ganesha, nfs-ganesha-vfs and libnfs-utils (make setup installs them)"))
    func theMountIsServedOverNFSAndItsWritesAreCoordinated() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("dir/seeded.txt", "seeded\n")
        let port = 20000 + Int(getpid() % 20000)
        let configuration = fx.base.appendingPathComponent("ganesha.conf").path
        try """
        NFS_CORE_PARAM { Protocols = 4; NFS_Port = \(port); Bind_addr = 127.0.0.1; Enable_NLM = false; Enable_RQUOTA = false; }
        NFSV4 { Graceless = true; }
        EXPORT {
            Export_Id = 1; Path = \(fx.mountPoint.path); Pseudo = /coordfs; Access_Type = RW;
            Squash = No_Root_Squash; Protocols = 4; Transports = TCP; SecType = sys; FSAL { Name = VFS; }
        }
        LOG { Default_Log_Level = WARN; }
        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let server = try Child(
            Self.server,
            [
                "-F", "-f", configuration, "-L", fx.base.appendingPathComponent("ganesha.log").path,
                "-p", fx.base.appendingPathComponent("ganesha.pid").path
            ])
        defer { server.signal(SIGTERM); _ = server.waitForExit(timeout: .seconds(10)) }
        func url(_ path: String) -> String { "nfs://127.0.0.1/coordfs/\(path)?version=4&nfsport=\(port)" }
        #expect(
            eventually(.seconds(20)) {
                (try? run("/usr/bin/nfs-ls", [url("dir/")]))?.output.contains("seeded.txt") == true
            },
            "the export never listed dir/")

        let log = EventLog()
        fx.domain!.addFilePresenter(LoggingPresenter("D", fx.path("dir"), log: log))
        let local = fx.base.appendingPathComponent("local.txt").path
        try "written over NFS\n".write(toFile: local, atomically: true, encoding: .utf8)
        let copied = try run("/usr/bin/nfs-cp", [local, url("dir/new.txt")])
        #expect(copied.status == 0, "\(copied)")
        #expect(
            try String(contentsOf: fx.backing.appendingPathComponent("dir/new.txt"), encoding: .utf8)
                == "written over NFS\n")
        #expect(log.waitFor("D:subitemDidAppear new.txt"), "the NFS server's create is coordinated and told")

        // The server finds the items again by their handles once the kernel has dropped them.
        sync()
        try "3\n".write(toFile: "/proc/sys/vm/drop_caches", atomically: false, encoding: .utf8)
        #expect(try run("/usr/bin/nfs-cat", [url("dir/new.txt")]).output == "written over NFS\n")
        #expect(try run("/usr/bin/nfs-cat", [url("dir/seeded.txt")]).output == "seeded\n")
        let listed = try run("/usr/bin/nfs-ls", [url("dir/")]).output
        #expect(listed.contains("new.txt") && listed.contains("seeded.txt"), "\(listed)")
    }
}
