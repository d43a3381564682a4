import LinuxSystem
import CoordinationRuntime
import CFuse3
import CLinux
import CFusePassthrough
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Every C entry point of the mount, installed in one table. Each trampoline finds the
// `Filesystem` from the request, converts C arguments once, and calls its Swift handler.

/// Runs `body` with the request's `Filesystem`, not retained: the session's user data, which
/// the mount keeps alive while it serves. (Retained, it was two atomic operations a request on
/// one counter shared by every request thread.)
@inline(__always)
private func withFilesystem<Result>(_ req: fuse_req_t?, _ body: (Filesystem) -> Result) -> Result {
    Unmanaged<Filesystem>.fromOpaque(fuse_req_userdata(req)!)._withUnsafeGuaranteedRef(body)
}

@inline(__always)
private func reply(_ req: fuse_req_t?) -> Reply { Reply(req: req!) }

/// The interrupt callback libfuse calls when the kernel interrupts a waiting request.
let interruptTrampoline: fuse_interrupt_func_t = { req, data in
    withFilesystem(req) { $0.coordinator.interrupt(UInt(bitPattern: data)) }
}

/// The same for a waiting lock request (`Filesystem+Locks.swift`), whose waits are the lock
/// table's, not coordination's.
let lockInterruptTrampoline: fuse_interrupt_func_t = { req, data in
    withFilesystem(req) { $0.interruptLock(UInt(bitPattern: data)) }
}

enum FuseBridge {
    static func operations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        session(&ops)
        nodes(&ops)
        namespace(&ops)
        files(&ops)
        directories(&ops)
        extendedAttributes(&ops)
        locks(&ops)
        return ops
    }

    /// The session: INIT.
    private static func session(_ ops: inout fuse_lowlevel_ops) {
        ops.`init` = { userdata, conn in
            let fs = Unmanaged<Filesystem>.fromOpaque(userdata!).takeUnretainedValue()
            cfs_configure_connection(
                conn, fs.configuration.writebackCache ? 1 : 0, fs.configuration.kernelChecksPermissions ? 1 : 0,
                fs.fileLocks != nil ? 1 : 0)
            if let maxRead = fs.configuration.maxRead { conn!.pointee.max_read = maxRead }
            cfs_want_passthrough(fs.passthrough == nil ? 0 : fs.backing.filesystems.rootIsStacked ? 2 : 1)
            cfs_want_ring(
                conn, fs.configuration.ioUring ? fs.session.load(ordering: .relaxed) : nil, fs.lanesAll ? 1 : 0,
                fs.configuration.serveNice)
        }
    }

    /// Names and nodes: lookups, forgets, attributes.
    private static func nodes(_ ops: inout fuse_lowlevel_ops) {
        ops.lookup = { req, parent, name in
            withFilesystem(req) { $0.lookup(reply(req), NodeID(parent), FileSystemName.string(cString: name!)) }
        }
        ops.forget = { req, ino, count in
            withFilesystem(req) { fs in
                fs.forget(NodeID(ino), count)
                fuse_reply_none(req)
                fs.forgetRequestServed(items: 1)
            }
        }
        ops.forget_multi = { req, count, forgets in
            withFilesystem(req) { fs in
                fs.forget(UnsafeBufferPointer(start: forgets, count: count).lazy.map { (NodeID($0.ino), $0.nlookup) })
                fuse_reply_none(req)
                fs.forgetRequestServed(items: count)
            }
        }
        ops.getattr = { req, ino, fi in
            withFilesystem(req) { $0.getattr(reply(req), NodeID(ino), fi.map { cfs_file_info_handle($0) }) }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            let attr = attr!.pointee
            var change = Filesystem.AttributeChange()
            if toSet & FUSE_SET_ATTR_MODE != 0 { change.mode = attr.st_mode }
            if toSet & FUSE_SET_ATTR_UID != 0 { change.uid = attr.st_uid }
            if toSet & FUSE_SET_ATTR_GID != 0 { change.gid = attr.st_gid }
            if toSet & FUSE_SET_ATTR_SIZE != 0 { change.size = attr.st_size }
            if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
                change.atime = timespec(tv_sec: 0, tv_nsec: Int(CFS_UTIME_NOW))
            } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
                change.atime = attr.st_atim
            }
            if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 {
                change.mtime = timespec(tv_sec: 0, tv_nsec: Int(CFS_UTIME_NOW))
            } else if toSet & FUSE_SET_ATTR_MTIME != 0 {
                change.mtime = attr.st_mtim
            }
            withFilesystem(req) { $0.setattr(reply(req), NodeID(ino), change, fi.map { cfs_file_info_handle($0) }) }
        }
        ops.readlink = { req, ino in withFilesystem(req) { $0.readlink(reply(req), NodeID(ino)) } }
        ops.statfs = { req, ino in withFilesystem(req) { $0.statfs(reply(req), NodeID(ino)) } }
        ops.access = { req, ino, mask in withFilesystem(req) { $0.access(reply(req), NodeID(ino), mask) } }
    }

    /// Changes of names.
    private static func namespace(_ ops: inout fuse_lowlevel_ops) {
        ops.mknod = { req, parent, name, mode, device in
            withFilesystem(req) {
                $0.mknod(reply(req), NodeID(parent), FileSystemName.string(cString: name!), mode, device)
            }
        }
        ops.mkdir = { req, parent, name, mode in
            withFilesystem(req) { $0.mkdir(reply(req), NodeID(parent), FileSystemName.string(cString: name!), mode) }
        }
        ops.unlink = { req, parent, name in
            withFilesystem(req) {
                $0.unlink(reply(req), NodeID(parent), FileSystemName.string(cString: name!), directory: false)
            }
        }
        ops.rmdir = { req, parent, name in
            withFilesystem(req) {
                $0.unlink(reply(req), NodeID(parent), FileSystemName.string(cString: name!), directory: true)
            }
        }
        ops.symlink = { req, target, parent, name in
            withFilesystem(req) {
                $0.symlink(
                    reply(req), FileSystemName.string(cString: target!), NodeID(parent),
                    FileSystemName.string(cString: name!))
            }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            withFilesystem(req) {
                $0.rename(
                    reply(req), NodeID(parent), FileSystemName.string(cString: name!), NodeID(newParent),
                    FileSystemName.string(cString: newName!), UInt32(flags))
            }
        }
        ops.link = { req, ino, parent, name in
            withFilesystem(req) {
                $0.link(reply(req), NodeID(ino), NodeID(parent), FileSystemName.string(cString: name!))
            }
        }
    }

    /// Open files.
    private static func files(_ ops: inout fuse_lowlevel_ops) {
        ops.open = { req, ino, fi in withFilesystem(req) { $0.open(reply(req), NodeID(ino), OpenRequest(fi!)) } }
        ops.create = { req, parent, name, mode, fi in
            withFilesystem(req) {
                $0.create(
                    reply(req), NodeID(parent), FileSystemName.string(cString: name!), mode, OpenRequest(fi!))
            }
        }
        ops.read = { req, _, size, offset, fi in
            withFilesystem(req) { $0.read(reply(req), cfs_file_info_handle(fi!), size, offset) }
        }
        ops.write_buf = { req, _, buffers, offset, fi in
            withFilesystem(req) {
                $0.write(
                    reply(req), cfs_file_info_handle(fi!), WriteData(buffers: buffers!), offset,
                    flags: cfs_file_info_flags(fi!))
            }
        }
        ops.flush = { req, _, fi in
            withFilesystem(req) {
                $0.flush(reply(req), cfs_file_info_handle(fi!), lockOwner: cfs_file_info_lock_owner(fi!))
            }
        }
        ops.release = { req, _, fi in
            let flockOwner = cfs_file_info_flock_release(fi!) != 0 ? cfs_file_info_lock_owner(fi!) : nil
            withFilesystem(req) { $0.release(reply(req), cfs_file_info_handle(fi!), flockOwner: flockOwner) }
        }
        ops.fsync = { req, _, dataOnly, fi in
            withFilesystem(req) { $0.fsync(reply(req), cfs_file_info_handle(fi!), dataOnly: dataOnly != 0) }
        }
        ops.fallocate = { req, _, mode, offset, length, fi in
            withFilesystem(req) { $0.fallocate(reply(req), cfs_file_info_handle(fi!), mode, offset, length) }
        }
        ops.copy_file_range = { req, _, inOffset, inFile, _, outOffset, outFile, length, flags in
            withFilesystem(req) {
                $0.copyFileRange(
                    reply(req), cfs_file_info_handle(inFile!), inOffset,
                    cfs_file_info_handle(outFile!), outOffset, length, UInt32(flags))
            }
        }
        ops.lseek = { req, _, offset, whence, fi in
            withFilesystem(req) { $0.lseek(reply(req), cfs_file_info_handle(fi!), offset, whence) }
        }
    }

    /// Open directories.
    private static func directories(_ ops: inout fuse_lowlevel_ops) {
        ops.opendir = { req, ino, fi in withFilesystem(req) { $0.opendir(reply(req), NodeID(ino), OpenRequest(fi!)) } }
        ops.readdir = { req, _, size, offset, fi in
            withFilesystem(req) { $0.readdir(reply(req), cfs_file_info_handle(fi!), size, offset, plus: false) }
        }
        ops.readdirplus = { req, _, size, offset, fi in
            withFilesystem(req) { $0.readdir(reply(req), cfs_file_info_handle(fi!), size, offset, plus: true) }
        }
        ops.releasedir = { req, _, fi in withFilesystem(req) { $0.releasedir(reply(req), cfs_file_info_handle(fi!)) } }
        ops.fsyncdir = { req, _, dataOnly, fi in
            withFilesystem(req) { $0.fsyncdir(reply(req), cfs_file_info_handle(fi!), dataOnly: dataOnly != 0) }
        }
    }

    /// Extended attributes.
    private static func extendedAttributes(_ ops: inout fuse_lowlevel_ops) {
        ops.setxattr = { req, ino, name, value, size, flags in
            let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            withFilesystem(req) {
                $0.setxattr(
                    reply(req), NodeID(ino), FileSystemName.string(cString: name!), bytes.map { UInt8($0) }, flags)
            }
        }
        ops.getxattr = { req, ino, name, size in
            withFilesystem(req) { $0.getxattr(reply(req), NodeID(ino), FileSystemName.string(cString: name!), size) }
        }
        ops.listxattr = { req, ino, size in withFilesystem(req) { $0.listxattr(reply(req), NodeID(ino), size) } }
        ops.removexattr = { req, ino, name in
            withFilesystem(req) { $0.removexattr(reply(req), NodeID(ino), FileSystemName.string(cString: name!)) }
        }
    }

    /// flock and fcntl locks: asked for at INIT only where the mount serves them
    /// (`Filesystem+Locks.swift`).
    private static func locks(_ ops: inout fuse_lowlevel_ops) {
        ops.getlk = { req, ino, fi, lock in
            withFilesystem(req) {
                $0.getlk(
                    reply(req), NodeID(ino), cfs_file_info_handle(fi!), owner: cfs_file_info_lock_owner(fi!),
                    KernelLock(cfs_lock_of(lock!)))
            }
        }
        ops.setlk = { req, ino, fi, lock, sleep in
            withFilesystem(req) {
                $0.setlk(
                    reply(req), NodeID(ino), cfs_file_info_handle(fi!), owner: cfs_file_info_lock_owner(fi!),
                    KernelLock(cfs_lock_of(lock!)), waits: sleep != 0)
            }
        }
        ops.flock = { req, ino, fi, operation in
            withFilesystem(req) {
                $0.flock(
                    reply(req), NodeID(ino), cfs_file_info_handle(fi!), owner: cfs_file_info_lock_owner(fi!),
                    operation: operation)
            }
        }
    }
}
