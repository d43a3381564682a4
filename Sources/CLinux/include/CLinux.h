// Linux's calls and constants that Swift's Glibc module does not carry (GNU extensions, raw
// system calls, <linux/*.h> values), as plain inline functions. The other C of coordfs is
// libfuse's (CFuse3) and the FUSE device's (CFusePassthrough).
#ifndef COORDFS_CLINUX_H
#define COORDFS_CLINUX_H


#include <fcntl.h>
#include <errno.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sysinfo.h>
#include <sys/types.h>
#include <unistd.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>

// The filesystem type (statfs f_type) of an open descriptor; -1 when it cannot be told.
static inline long cfs_filesystem_type(int fd) {
    struct statfs info;
    return fstatfs(fd, &info) == 0 ? (long)info.f_type : -1;
}

// errno, readable from Swift right after a call.
static inline int cfs_errno(void) { return errno; }
static inline void cfs_set_errno(int value) { errno = value; }

#include <sys/syscall.h>
static const int CFS_O_PATH = 010000000;
static const int CFS_O_DIRECT = 040000;
static const int CFS_O_NOATIME = 01000000;
/// O_TMPFILE (__O_TMPFILE | O_DIRECTORY), which Swift does not import.
static const int CFS_O_TMPFILE = 020200000;
static const int CFS_AT_EMPTY_PATH = 0x1000;
static const unsigned CFS_RENAME_NOREPLACE = 1;
static const unsigned CFS_RENAME_EXCHANGE = 2;
static const long CFS_UTIME_NOW = ((1l << 30) - 1l);
static const long CFS_UTIME_OMIT = ((1l << 30) - 2l);

// A private copy of the mount tree at `path` (and every mount below it), noatime: detached,
// seen by no other process, and gone with the last descriptor of it. open_tree (Linux 5.2) and
// mount_setattr (5.12), both with CAP_SYS_ADMIN; the constants are <linux/mount.h>'s, whose
// MS_* macros would clash with <sys/mount.h>'s. Its root as an O_PATH descriptor, or -errno.
static inline int cfs_open_noatime_tree(const char *path) {
#if defined(SYS_open_tree) && defined(SYS_mount_setattr)
    const unsigned clone = 1, recursive = 0x8000;             // OPEN_TREE_CLONE, AT_RECURSIVE
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, path, clone | O_CLOEXEC | recursive);
    if (tree < 0) return -errno;
    struct { unsigned long long set, clear, propagation, userns_fd; } attributes = {
        0x10, 0x70, 0, 0                                      // MOUNT_ATTR_NOATIME; MOUNT_ATTR__ATIME
    };
    if (syscall(SYS_mount_setattr, tree, "", CFS_AT_EMPTY_PATH | recursive, &attributes, sizeof attributes) != 0) {
        int failure = errno;
        close(tree);
        return -failure;
    }
    return tree;
#else
    (void)path;
    return -ENOSYS;
#endif
}

static inline int cfs_fallocate(int fd, int mode, off_t offset, off_t length) {
    return (int)syscall(SYS_fallocate, fd, mode, offset, length);
}
static inline ssize_t cfs_getxattr(const char *path, const char *name, void *value, size_t size) {
    return getxattr(path, name, value, size);
}
static inline ssize_t cfs_listxattr(const char *path, char *list, size_t size) {
    return listxattr(path, list, size);
}
static inline int cfs_setxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    return setxattr(path, name, value, size, flags);
}
static inline int cfs_removexattr(const char *path, const char *name) {
    return removexattr(path, name);
}
static inline ssize_t cfs_copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t len, unsigned flags) {
    return syscall(SYS_copy_file_range, in, in_off, out, out_off, len, flags);
}
// FICLONE: `dest` shares `src`'s blocks (btrfs, XFS, bcachefs); -1 where the filesystem has no reflinks.
static inline int cfs_clone_file(int dest, int src) {
    return ioctl(dest, _IOW(0x94, 9, int), src);
}

// File handles, so an inode's descriptor can be closed and opened again (the open-file limit,
// docs/decisions.md). Raw syscalls: the glibc wrappers need _GNU_SOURCE.
#define CFS_MAX_HANDLE 128
struct cfs_file_handle {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[CFS_MAX_HANDLE];
};

/// The handle of the item `fd` refers to, and the id of the mount it was reached through
/// (`mount_id`); 0 or -1 (errno).
static inline int cfs_name_to_handle(int fd, struct cfs_file_handle *handle, int *mount_id) {
    handle->handle_bytes = CFS_MAX_HANDLE;
    return (int)syscall(SYS_name_to_handle_at, fd, "", handle, mount_id, 0x1000 /* AT_EMPTY_PATH */);
}

/// The handle of the item `name` names in the directory `dirfd`, not following a symbolic
/// link, and the id of the mount it lies on (`mount_id`); 0 or -1 (errno).
static inline int cfs_name_to_handle_at(int dirfd, const char *name, struct cfs_file_handle *handle, int *mount_id) {
    handle->handle_bytes = CFS_MAX_HANDLE;
    return (int)syscall(SYS_name_to_handle_at, dirfd, name, handle, mount_id, 0);
}

/// The item of `handle`, on the filesystem of `mount_fd`, opened with `flags`; or -1 (errno).
static inline int cfs_open_by_handle_with(int mount_fd, struct cfs_file_handle *handle, int flags) {
    return (int)syscall(SYS_open_by_handle_at, mount_fd, handle, flags);
}

/// An O_PATH descriptor for `handle`, on the filesystem of `mount_fd`; or -1 (errno).
static inline int cfs_open_by_handle(int mount_fd, struct cfs_file_handle *handle) {
    return cfs_open_by_handle_with(mount_fd, handle, 010000000 /* O_PATH */ | 02000000 /* O_CLOEXEC */);
}

// Renames with flags (RENAME_NOREPLACE, RENAME_EXCHANGE).
static inline int cfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

// Whether thread `tid` is its process's first thread: tgkill finds a thread only in the thread
// group it is told, and signal 0 sends nothing (EPERM: found, but not ours to signal).
static inline int cfs_thread_leads_its_process(pid_t tid) {
    return syscall(SYS_tgkill, tid, tid, 0) == 0 || errno == EPERM;
}

// Whether system call `number` (as /proc/PID/task/TID/syscall names the one a thread sleeps in)
// reads one descriptor, its first argument: read, readv, recvfrom (recv), recvmsg. The numbers
// are the machine's own.
static inline int cfs_reads_one_descriptor(long number) {
    if (number == SYS_read || number == SYS_readv) return 1;
#ifdef SYS_recvfrom
    if (number == SYS_recvfrom) return 1;
#endif
#ifdef SYS_recvmsg
    if (number == SYS_recvmsg) return 1;
#endif
    return 0;
}

// Whether system call `number` with `command` as its second argument (as /proc/PID/task/TID/
// syscall shows them) waits for a process-owned record lock: fcntl's F_SETLKW. (Not the
// open-file-description locks of F_OFD_SETLKW: any process sharing the description may let
// those go.)
static inline int cfs_waits_for_record_lock(long number, unsigned long command) {
#ifdef SYS_fcntl64
    if (number == SYS_fcntl64 && command == F_SETLKW) return 1;
#endif
    return number == SYS_fcntl && command == F_SETLKW;
}

// The CPU the calling thread runs on: glibc reads it from rseq or the vDSO, no system call.
// (Declared here: <sched.h> declares it only under _GNU_SOURCE.)
extern int sched_getcpu(void);
static inline int cfs_current_cpu(void) { return sched_getcpu(); }

// Lets the calling thread run on any CPU of the machine but `cpu`, or, when the process may use
// none of those, on any. 0 or -1. (cpu_set_t and its macros need _GNU_SOURCE too.)
static inline int cfs_run_away_from_cpu(int cpu) {
    unsigned long mask[16] = { 0 };
    int cpus = get_nprocs_conf();
    if (cpus > (int)(sizeof(mask) * 8)) cpus = (int)(sizeof(mask) * 8);
    for (int index = 0; index < cpus; index++) {
        if (index != cpu) mask[index / 64] |= 1UL << (index % 64);
    }
    if (syscall(SYS_sched_setaffinity, 0, sizeof(mask), mask) == 0) return 0;
    if (cpu >= 0 && cpu < cpus) mask[cpu / 64] |= 1UL << (cpu % 64);
    return (int)syscall(SYS_sched_setaffinity, 0, sizeof(mask), mask);
}

// Names the calling thread (15 bytes at most are kept), as /proc/self/task/*/comm and tools
// show it: 0 or an error number. (pthread_setname_np needs _GNU_SOURCE too.)
extern int pthread_setname_np(pthread_t thread, const char *name);
static inline int cfs_name_this_thread(const char *name) { return pthread_setname_np(pthread_self(), name); }

// fanotify, for changes made to a backing directory behind the mount: a mark on the whole
// filesystem, reporting each change by its directory's file handle and the entry's name
// (Linux 5.17 for renames as one event). Its queue is unbounded: a burst of changes is read
// late rather than lost. The descriptor (non-blocking), or -errno.
#include <sys/fanotify.h>
#include <stdint.h>
// Not FAN_MODIFY: a mark that asks for it makes every write on the filesystem, anyone's, pay
// for an event (a fifth of 4 KiB random writes); a write is seen at its file's close, or, for
// a file the mount marks by itself (`cfs_fanotify_watch_writes`), as it is made.
#define CFS_WATCH_MASK (FAN_CREATE | FAN_DELETE | FAN_RENAME | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_ONDIR)
static inline int cfs_fanotify_watch_filesystem(const char *path) {
    // The item's own handle too (FAN_REPORT_TARGET_FID): a write to a file marked by itself is
    // known by it, whatever name the file has by then (another link, none).
    int fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS
                           | FAN_REPORT_DFID_NAME_TARGET, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, CFS_WATCH_MASK, AT_FDCWD, path) != 0) {
        int failure = errno;
        close(fd);
        return -failure;
    }
    return fd;
}

// The same watch made of one mark per directory (`cfs_fanotify_mark_directory`), which needs no
// privilege: unprivileged, the queue is bounded (an overflow is reported) and so are the marks
// (fs.fanotify.max_user_marks), and an event names its process only when it is the listener's.
// The descriptor (non-blocking), or -errno.
// Each event also names the item it is about (FAN_REPORT_TARGET_FID): a directory made, moved
// or removed is known by its handle, whatever its name is by the time the event is read.
static inline int cfs_fanotify_watch_directories(void) {
    unsigned int flags = FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME_TARGET;
    int fd = fanotify_init(flags | FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == EPERM) fd = fanotify_init(flags, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

// Adds (or with `add` 0 removes) the mark of one file's writes (FAN_MODIFY) in `group`, by a
// descriptor of the file: an O_PATH one too, named through /proc, as fanotify_mark takes no
// O_PATH descriptor itself. 0 or -errno.
static inline int cfs_fanotify_watch_writes(int group, int fd, int add) {
    char path[48];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return fanotify_mark(group, add ? FAN_MARK_ADD : FAN_MARK_REMOVE, FAN_MODIFY, AT_FDCWD, path) == 0 ? 0 : -errno;
}

// Removes every file's and directory's own mark in `group` (not a filesystem's): 0 or -errno.
static inline int cfs_fanotify_remove_inode_marks(int group) {
    return fanotify_mark(group, FAN_MARK_FLUSH, 0, AT_FDCWD, NULL) == 0 ? 0 : -errno;
}

// Marks the directory `directory` (a descriptor) for changes of its entries and of itself: 0 or -errno.
static inline int cfs_fanotify_mark_directory(int group, int directory) {
    return fanotify_mark(group, FAN_MARK_ADD, CFS_WATCH_MASK | FAN_EVENT_ON_CHILD, directory, NULL) == 0 ? 0 : -errno;
}

#ifndef FAN_MARK_IGNORE
#define FAN_MARK_IGNORE 0x00000400
#endif
// Leaves out of `group`'s events (a filesystem's mark) those inside the directory `directory` (a
// descriptor): its entries made and removed, and their attributes changed and their closes
// after a write, as reported by their name in it (FAN_EVENT_ON_CHILD). An inode event that
// names no directory (a link count changed) is still reported. Not renames, whose other side
// may be a watched directory. With `directories` 0, not events about directories in it either,
// so that one made in it is still seen. FAN_MARK_IGNORE (Linux 6.0) makes FAN_ONDIR and
// FAN_EVENT_ON_CHILD count in an ignore mask; on a directory the mask must survive modifications.
// 0 or -errno (EINVAL before Linux 6.0).
static inline int cfs_fanotify_ignore_directory(int group, int directory, int directories) {
    uint64_t mask = FAN_CREATE | FAN_DELETE | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_EVENT_ON_CHILD | (directories ? FAN_ONDIR : 0);
    return fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_IGNORE | FAN_MARK_IGNORED_SURV_MODIFY, mask, directory, NULL) == 0 ? 0 : -errno;
}

// The bytes of the handle of the item (a directory, a file) `fd` refers to, or with `name` not
// "" of the item it names below the directory `fd` (not following a symbolic link), laid out as
// fanotify reports handles, into `bytes` (room for `size`): their count, or -errno. Needs no
// privilege, unlike opening one.
static inline int cfs_handle_bytes(int fd, const char *name, void *bytes, size_t size) {
    struct cfs_file_handle handle;
    int mount_id = 0;
    int flags = name[0] == 0 ? 0x1000 /* AT_EMPTY_PATH */ : 0;
    handle.handle_bytes = CFS_MAX_HANDLE;
    // AT_HANDLE_FID (Linux 6.5): the handle as fanotify encodes it, even where handles cannot open.
    if (syscall(SYS_name_to_handle_at, fd, name, &handle, &mount_id, flags | 0x200 /* AT_HANDLE_FID */) != 0) {
        if (errno != EINVAL) return -errno;
        handle.handle_bytes = CFS_MAX_HANDLE;
        if (syscall(SYS_name_to_handle_at, fd, name, &handle, &mount_id, flags) != 0) return -errno;
    }
    size_t count = 2 * sizeof(unsigned int) + handle.handle_bytes;
    if (count > size) return -ENAMETOOLONG;
    memcpy(bytes, &handle, count);
    return (int)count;
}

// What changed, as one fanotify event reports it.
struct cfs_backing_change {
    uint64_t mask;
    int32_t pid;
    // The directory (a file handle, laid out as cfs_file_handle) and the entry's name; for a
    // rename, where it was.
    const void *directory;
    const char *name;
    // For a rename: where it is now.
    const void *new_directory;
    const char *new_name;
    // The item itself, when the watch reports it (FAN_REPORT_TARGET_FID).
    const void *object;
};

static const uint64_t CFS_CHANGE_CREATE = FAN_CREATE, CFS_CHANGE_DELETE = FAN_DELETE, CFS_CHANGE_RENAME = FAN_RENAME,
    CFS_CHANGE_MODIFY = FAN_MODIFY, CFS_CHANGE_ATTRIB = FAN_ATTRIB, CFS_CHANGE_CLOSE_WRITE = FAN_CLOSE_WRITE,
    CFS_CHANGE_ON_DIRECTORY = FAN_ONDIR, CFS_CHANGE_OVERFLOW = FAN_Q_OVERFLOW;

// Reads the event at *offset of `length` bytes into `change` and moves *offset past it: 1, or
// 0 when no whole event is left.
static inline int cfs_fanotify_next(const char *buffer, size_t length, size_t *offset, struct cfs_backing_change *change) {
    const struct fanotify_event_metadata *event = (const void *)(buffer + *offset);
    size_t left = length - *offset;
    if (!FAN_EVENT_OK(event, left)) return 0;
    *offset += event->event_len;
    memset(change, 0, sizeof *change);
    change->mask = event->mask;
    change->pid = event->pid;
    const char *record = (const char *)event + event->metadata_len;
    const char *end = (const char *)event + event->event_len;
    while (record + sizeof(struct fanotify_event_info_header) <= end) {
        const struct fanotify_event_info_header *header = (const void *)record;
        if (header->len == 0 || record + header->len > end) break;
        // A record with a handle and a name: its header, the filesystem id, the handle's two
        // words and bytes, and a name ending within the record.
        size_t fixed = sizeof(struct fanotify_event_info_fid) + 2 * sizeof(unsigned int);
        if (header->info_type == FAN_EVENT_INFO_TYPE_FID && header->len >= fixed) {
            const struct fanotify_event_info_fid *fid = (const void *)record;
            const struct cfs_file_handle *handle = (const void *)fid->handle;
            if (handle->handle_bytes <= CFS_MAX_HANDLE && fixed + handle->handle_bytes <= header->len) change->object = handle;
            record += header->len;
            continue;
        }
        if ((header->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME || header->info_type == FAN_EVENT_INFO_TYPE_OLD_DFID_NAME
             || header->info_type == FAN_EVENT_INFO_TYPE_NEW_DFID_NAME) && header->len > fixed) {
            const struct fanotify_event_info_fid *fid = (const void *)record;
            const struct cfs_file_handle *handle = (const void *)fid->handle;
            if (handle->handle_bytes > CFS_MAX_HANDLE || fixed + handle->handle_bytes >= header->len) { record += header->len; continue; }
            const char *name = (const char *)handle->f_handle + handle->handle_bytes;
            if (memchr(name, 0, header->len - fixed - handle->handle_bytes) == NULL) { record += header->len; continue; }
            if (header->info_type == FAN_EVENT_INFO_TYPE_NEW_DFID_NAME) {
                change->new_directory = handle;
                change->new_name = name;
            } else {
                change->directory = handle;
                change->name = name;
            }
        }
        record += header->len;
    }
    return 1;
}

// The bytes of a file handle as reported (its header and its f_handle), for keeping it.
static inline size_t cfs_file_handle_size(const void *handle) {
    return 2 * sizeof(unsigned int) + ((const struct cfs_file_handle *)handle)->handle_bytes;
}

// An O_PATH descriptor of the item a reported handle names, on the filesystem of `mount_fd`;
// or -1 (errno).
static inline int cfs_open_reported_handle(int mount_fd, const void *handle) {
    return (int)syscall(SYS_open_by_handle_at, mount_fd, handle, 010000000 /* O_PATH */ | 02000000 /* O_CLOEXEC */);
}

#endif
