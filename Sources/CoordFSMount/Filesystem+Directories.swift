import LinuxSystem
import CFuse3
import CLinux
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// opendir, readdir, releasedir, fsyncdir. Listing a directory is a metadata read: not
/// coordinated.
extension Filesystem {
    func opendir(_ reply: Reply, _ id: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        guard let place = files.budget.take(for: caller(reply)) else { return reply.error(EMFILE) }
        let (fd, failure) = inodes.withFD(inode, orElse: { (Int32(-1), $0) }) { inodeFD -> (Int32, Errno?) in
            let fd = accessTimes.open(O_RDONLY | O_DIRECTORY | O_CLOEXEC) { Glibc.open(procPath(inodeFD), $0) }
            return (fd, fd == -1 ? Errno.current : nil)
        }
        if let failure {
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        guard let stream = fdopendir(fd) else {
            let failure = Errno.current
            close(fd)
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        let file = OpenFile(fd: fd, inode: inode, claim: nil, created: false)
        file.directory = stream
        reply.open(fi.pointee, handle: files.insert(file, in: place), keepCache: false, noFlush: false)
    }

    /// readdir, and readdirplus when `plus`: each entry then carries its attributes and counts
    /// as a lookup (not `.` and `..`), which saves the kernel a LOOKUP per entry.
    func readdir(_ reply: Reply, _ handle: UInt64, _ size: Int, _ offset: off_t, plus: Bool) {
        guard let file = files[handle], let stream = file.directory else { return reply.error(EBADF) }
        var buffer = [CChar](repeating: 0, count: size)
        var used = 0
        seekdir(stream, offset)
        while true {
            errno = 0
            guard let entry = Glibc.readdir(stream) else {
                if errno != 0 && used == 0 { return reply.error(Errno.current) }
                break
            }
            let record = DirectoryEntry(entry)
            let needed: Int
            if plus {
                var parameters = fuse_entry_param()
                var found: Inode?
                if record.name != "." && record.name != ".." {
                    guard let (inode, info) = try? lookupNode(file.inode, record.name) else { continue }   // gone meanwhile
                    found = inode
                    parameters.ino = fuse_ino_t(inode.id)
                    parameters.attr = shown(info)
                    parameters.attr_timeout = timeout
                    parameters.entry_timeout = timeout
                } else {
                    parameters.attr.st_ino = ino_t(record.number)
                    parameters.attr.st_mode = record.type
                }
                needed = buffer.withUnsafeMutableBufferPointer { pointer in
                    FileSystemName.withCString(record.name) {
                        fuse_add_direntry_plus(reply.req, pointer.baseAddress! + used, size - used, $0, &parameters, record.next)
                    }
                }
                if needed > size - used, let found { inodes.forget(found.id, 1) }   // not sent: not looked up
            } else {
                needed = buffer.withUnsafeMutableBufferPointer { pointer in
                    FileSystemName.withCString(record.name) {
                        cfs_add_direntry(reply.req, pointer.baseAddress! + used, size - used, $0, ino_t(record.number), record.type, record.next)
                    }
                }
            }
            // Not sent: the next READDIR starts at the last sent entry's offset (the seekdir above).
            if needed > size - used { break }
            used += needed
        }
        buffer.withUnsafeBytes { reply.buffer(UnsafeRawBufferPointer(rebasing: $0[0..<used])) }
    }

    func releasedir(_ reply: Reply, _ handle: UInt64) {
        guard let file = files.remove(handle) else { return reply.error(EBADF) }
        if let stream = file.directory { closedir(stream) } else { close(file.fd) }
        reply.ok()
    }

    func fsyncdir(_ reply: Reply, _ handle: UInt64, dataOnly: Bool) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        if (dataOnly ? fdatasync(file.fd) : Glibc.fsync(file.fd)) == -1 { return reply.error(Errno.current) }
        reply.ok()
    }
}
