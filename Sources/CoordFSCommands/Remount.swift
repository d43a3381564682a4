import LinuxSystem
import ArgumentParser
import CoordinationClient
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `mount -o remount,OPTIONS MOUNTPOINT` (and `coordfs mount -o remount,... BACKING MOUNTPOINT`):
/// changes a live mount instead of mounting again over it. The daemon takes `uid=`, `gid=`
/// and `umask=` at once and refuses any other option that differs from the mount's; `ro` and
/// `rw` are the kernel's, asked of it here, keeping the mount's other flags.
extension Mount {
    func remount() throws {
        let options = o.flatMap { $0.split(separator: ",").map(String.init) }
        guard let given = mountPoint ?? backing else { throw CommandFailure("-o remount: name the mount point") }
        let target = Self.absolute(given)
        try MountTable.refuseAbandoned(target)
        guard MountTable.isMountPoint(target), let socketPath = MountTable.coordfsMount(serving: target)?.socket else {
            throw CommandFailure("-o remount: '\(given)' is not a coordfs mount point")
        }
        if fake {
            print("coordfs: would remount \(target) -o \(options.joined(separator: ","))")
            return
        }
        do {
            let client = try ControlClient(socketPath: socketPath)
            defer { client.close() }
            // mount(8)'s own options are the helper's, and log= coordfs's, as at mount.
            let daemons = options.filter {
                !Self.mountHelperOptions.contains($0) && $0 != "allow_overlap" && !$0.hasPrefix("log=")
            }
            _ = try client.request { .remount(id: $0, options: daemons) }
        } catch let error as ControlError {
            throw CommandFailure("-o remount: \(error.message)")
        }
        if let readOnly = options.last(where: { $0 == "ro" || $0 == "rw" }).map({ $0 == "ro" }) {
            try Self.remountKernel(target, readOnly: readOnly)
        }
        if verbose { print("coordfs: remounted \(target) -o \(options.joined(separator: ","))") }
    }

    /// mount(2) with MS_REMOUNT: read-only or not, with the flags the mount has (statvfs's
    /// ST_* bits are the MS_* bits for these), as mount(8) would keep them.
    static func remountKernel(_ target: String, readOnly: Bool) throws {
        var info = statvfs()
        do throws(Errno) { _ = try check(statvfs(target, &info)) } catch {
            throw CommandFailure("-o remount: \(target): \(error.description)")
        }
        let kept: UInt = 2 | 4 | 8 | 16 | 1024 | 2048  // nosuid, nodev, noexec, sync, noatime, nodiratime
        let remount: UInt = 32, readOnlyFlag: UInt = 1, relatime: UInt = 1 << 21
        var flags = remount | (info.f_flag & kept) | (readOnly ? readOnlyFlag : 0)
        if info.f_flag & 4096 != 0 { flags |= relatime }  // ST_RELATIME
        do throws(Errno) { _ = try check(Glibc.mount(nil, target, nil, flags, nil)) } catch {
            throw CommandFailure("-o remount,\(readOnly ? "ro" : "rw"): \(target): \(error.description)")
        }
    }
}
