import LinuxSystem
import CLinux
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// opendir, readdir, releasedir, fsyncdir. Listing a directory is a metadata read: not
/// coordinated.
extension Filesystem {
    func opendir(_ reply: consuming Reply, _ id: NodeID, _ request: OpenRequest) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        guard let place = placeForOpen(of: reply.caller.uid) else { return reply.error(EMFILE) }
        let (fd, failure) = inodes.withFD(inode, orElse: { (Int32(-1), $0) }) { inodeFD -> (Int32, Errno?) in
            // "." of its O_PATH descriptor: one name, where its /proc path walks four and reads a
            // link; that path where "." cannot be opened (no search permission for the daemon).
            let fd = accessTimes.open(O_RDONLY | O_DIRECTORY | O_CLOEXEC) { flags in
                inodes.withDescriptorRoom {
                    let fd = openat(inodeFD, ".", flags)
                    return fd >= 0 ? fd : Glibc.open(procPath(inodeFD), flags)
                }
            }
            return (fd, fd.failure)
        }
        if let failure {
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        guard let stream = fdopendir(fd) else {
            let failure = Errno.ofFailedCall()
            close(fd)
            files.budget.giveBack(place)
            return reply.error(failure)
        }
        let file = OpenFile(fd: fd, inode: inode, created: false)
        file.directory = stream
        // Its listing may be kept where the kernel is told of every change to it: through the
        // mount, or behind it on the watched filesystem (`BackingWatch` makes it forget).
        reply.openDirectory(
            request.info, handle: files.insert(file, in: place), cacheListing: inode.device == watchedDevice)
    }

    /// readdir, and readdirplus when `plus`: each entry then carries its attributes and counts
    /// as a lookup (not `.` and `..`), which saves the kernel a LOOKUP per entry.
    func readdir(_ reply: consuming Reply, _ handle: UInt64, _ size: Int, _ offset: off_t, plus: Bool) {
        let readPoint = watchedWrites.readPoint
        guard let file = files[handle], let stream = file.directory else { return reply.error(EBADF) }
        var listing = DirectoryListing(for: reply, size: size)
        seekdir(stream, offset)
        while true {
            let found: UnsafeMutablePointer<dirent>?
            do { found = try nextEntry(of: stream) } catch {
                if listing.used == 0 { return reply.error(error) }
                break
            }
            guard let entry = found else { break }
            let record = DirectoryEntry(entry)
            if isVersionStore(file.inode.id, record.name) { continue }
            let added: Bool
            if plus {
                var found: Result<(Inode, stat), Errno>?
                if record.name != "." && record.name != ".." {
                    do throws(Errno) { found = .success(try lookupNode(file.inode, record.name)) } catch {
                        found = .failure(error)
                    }
                }
                switch found {
                case .success(let (inode, info)):
                    added = FileSystemName.withCString(record.name) {
                        listing.add(
                            $0, node: inode.id, attributes: shown(info), timeout: timeout(onDevice: inode.device),
                            attributeTimeout: attributeTimeout(for: info, of: inode, readSince: readPoint),
                            next: record.next)
                    }
                    if !added { inodes.forget(inode.id, 1) }  // not sent: not looked up
                case .failure(let failure) where failure.code == ENOENT:
                    continue  // gone meanwhile
                default:
                    // The dots, and a name the daemon may not look up (a directory its user may
                    // read but not search, as the caller may not either): listed as readdir
                    // lists it, by number and type, with no node (the kernel looks it up if asked).
                    var attributes = stat()
                    attributes.st_ino = ino_t(record.number)
                    attributes.st_mode = record.type
                    added = FileSystemName.withCString(record.name) {
                        listing.add(
                            $0, node: nil, attributes: attributes, timeout: 0, attributeTimeout: 0, next: record.next)
                    }
                }
            } else {
                added = FileSystemName.withCString(record.name) {
                    listing.add($0, number: ino_t(record.number), type: record.type, next: record.next)
                }
            }
            // Not sent: the next READDIR starts at the last sent entry's offset (the seekdir above).
            if !added { break }
        }
        reply.buffer(listing.buffer, count: listing.used)
    }

    func releasedir(_ reply: consuming Reply, _ handle: UInt64) {
        guard let file = files.remove(handle) else { return reply.error(EBADF) }
        if let stream = file.directory { closedir(stream) } else { close(file.fd) }
        reply.ok()
    }

    func fsyncdir(_ reply: consuming Reply, _ handle: UInt64, dataOnly: Bool) {
        guard let file = files[handle] else { return reply.error(EBADF) }
        if let failure = (dataOnly ? fdatasync(file.fd) : Glibc.fsync(file.fd)).failure { return reply.error(failure) }
        reply.ok()
    }
}
