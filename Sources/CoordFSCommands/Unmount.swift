import LinuxSystem
import ArgumentParser
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs unmount [--lazy] MOUNTPOINT`.
struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unmount a coordfs mount cleanly.",
        discussion: """
            Exit status: 0 once the mount is gone (with --lazy, detached); 1 when it is not a coordfs \
            mount, is busy, or was made by another user, with the reason on standard error; 64 for a \
            command line it cannot take.
            """
    )

    /// libfuse's helper, through which a user other than root mounts and unmounts.
    static let fusermount3 = "/usr/bin/fusermount3"

    @Argument(
        help: "The mount point.",
        completion: .custom { _, _, _ in MountTable.coordfsMounts(in: MountTable.entries()).map(\.mountPoint) })
    var mountPoint: String

    @Flag(
        name: [.customShort("l"), .long],
        help:
            "Detach the mount now, as umount -l does: programs that have files open in it keep them (and their coordination) until they close them, and the daemon ends after the last."
    )
    var lazy = false

    func run() throws {
        // Before anything asks the mount, or even resolves its path: a mount whose killed daemon
        // could not finish dying would keep this command waiting with every program in it.
        if let dead = DeadConnection.mount(at: DeadConnection.absolute(mountPoint)) {
            do throws(Errno) { try DeadConnection.abort(dead) } catch {
                throw CommandFailure("cannot unmount '\(mountPoint)': \(error.description)")
            }
            FileHandle.standardError.write(
                Data(
                    ("coordfs: the daemon of '\(mountPoint)' had gone; its connection is ended (programs still "
                        + "waiting in it got 'transport endpoint is not connected') and the mount removed\n").utf8))
            return
        }
        let path = URL(fileURLWithPath: Mount.absolute(mountPoint)).resolvingSymlinksInPath().path
        guard let type = MountTable.type(of: path) else { throw CommandFailure("'\(mountPoint)' is not a mount point") }
        // Asked, not read from mountinfo, where -o subtype= and fsname= rename it.
        guard MountTable.isCoordfs(path) else {
            try MountTable.refuseAbandoned(path, named: mountPoint)
            throw CommandFailure("'\(mountPoint)' is a \(type) mount, not coordfs")
        }
        // fusermount3 unmounts only its own user's mounts, and says so only as "entry for … not
        // found in /etc/mtab"; a user other than root cannot unmount another user's at all.
        if geteuid() != 0, let entry = MountTable.entries().last(where: { $0.mountPoint == path }),
            let owner = MountTable.owner(of: entry), owner != geteuid()
        {
            throw CommandFailure(
                "cannot unmount '\(mountPoint)': \(MountTable.userName(owner)) made it, and a mount is unmounted "
                    + "only by the user who made it or by root")
        }
        // Read before trying: a busy mount is explained with it.
        let statistics = Status.statistics(ofMountAt: path)
        let openFiles = statistics?["open_files"] as? Int
        // Holds taken through the control socket (`coordfs coordinate`, a Swift program's
        // coordinated access) keep no file open, so the kernel would let the mount go with their
        // holders still at work inside them: they make it busy too, unless detached.
        if !lazy, let holds = statistics?["socket_holds"] as? Int, holds > 0 {
            throw CommandFailure(
                "cannot unmount '\(mountPoint)': it is busy: \(holds == 1 ? "1 hold is" : "\(holds) holds are") taken "
                    + "through its control socket; `coordfs status \(path)` shows whose; or `coordfs unmount --lazy` detaches it now"
            )
        }
        if geteuid() == 0 {
            do throws(Errno) { _ = try check(umount2(path, lazy ? Int32(MNT_DETACH) : 0)) } catch {
                throw CommandFailure(
                    "cannot unmount '\(mountPoint)': "
                        + (error == .resourceBusy ? busy(path, openFiles) : error.description))
            }
            return
        }
        let helper = Process()
        helper.executableURL = URL(fileURLWithPath: Self.fusermount3)
        helper.arguments = lazy ? ["-u", "-z", path] : ["-u", path]
        let errors = Pipe()
        helper.standardError = errors
        try helper.run()
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        helper.waitUntilExit()
        guard helper.terminationStatus == 0 else {
            // Its own line names its errno; ours says what to do about a busy mount.
            let why = said.split(separator: "\n").last.map {
                $0.hasPrefix("fusermount3: ") ? String($0.dropFirst(13)) : String($0)
            }
            if MountTable.type(of: path) != nil, why?.contains("busy") ?? true {
                throw CommandFailure("cannot unmount '\(mountPoint)': \(busy(path, openFiles))")
            }
            throw CommandFailure(
                "cannot unmount '\(mountPoint)': \(why ?? "fusermount3 failed (status \(helper.terminationStatus))")")
        }
    }

    /// Why a mount is busy, and how to find out who keeps it so.
    private func busy(_ path: String, _ openFiles: Int?) -> String {
        let files = openFiles.map { $0 == 1 ? "1 file is open through it" : "\($0) files are open through it" }
        let who =
            "`coordfs status \(path)` shows who holds files there, `fuser -vm \(path)` every process using it (a working directory, say)"
        if let files, openFiles != 0 {
            return "it is busy: \(files); \(who); or `coordfs unmount --lazy` detaches it now"
        }
        return "it is busy: \(who); or `coordfs unmount --lazy` detaches it now"
    }
}
