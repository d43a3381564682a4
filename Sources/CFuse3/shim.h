// libfuse3's low-level API, pinned to one version, and small inline helpers for what Swift
// cannot express (macros, bit flags, buffer vectors). Linux's own calls are in CLinux.
#ifndef COORDFS_CFUSE3_SHIM_H
#define COORDFS_CFUSE3_SHIM_H

#include "fuse_use_version.h"
#include <fuse_lowlevel.h>
#include <fcntl.h>
#include <stdint.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <dirent.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

// fuse_session_new is a function in 3.14 and a macro in later versions.
static inline struct fuse_session *cfs_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
                                                   void *userdata) {
    return fuse_session_new(args, ops, sizeof(*ops), userdata);
}

// The multi-threaded loop with its configuration.
static inline int cfs_session_loop_mt(struct fuse_session *se, unsigned max_threads, unsigned idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (!config) return -ENOMEM;
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_loop_cfg_set_idle_threads(config, idle_threads);
    int result = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return result;
}

// What a mount asks of the kernel at INIT. `locks`: the mount serves flock and POSIX locks
// itself (a host of a shared store, whose locks must exclude the other hosts').
static inline void cfs_configure_connection(struct fuse_conn_info *conn, int writeback_cache, int posix_acl, int locks) {
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
    if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
    // The mount clears suid/sgid itself (Filesystem+Files.swift). The device hooks upgrade this to
    // KILLPRIV_V2, which also ends the GETXATTR security.capability before every write
    // (docs/performance.md).
    if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV) conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
    if (conn->capable & FUSE_CAP_EXPORT_SUPPORT) conn->want |= FUSE_CAP_EXPORT_SUPPORT;
    // Modes come unmasked with the caller's umask beside them: the backing filesystem applies
    // the umask, or the parent's default ACL instead (CallerUmask.swift).
    if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
    // ACLs checked by the kernel, as the backing filesystem checks them: only where the kernel
    // checks permissions at all (default_permissions, which this implies).
    if (posix_acl && (conn->capable & FUSE_CAP_POSIX_ACL)) conn->want |= FUSE_CAP_POSIX_ACL;
    if (writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    else conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
    // Locks stay local to the kernel's view of the mount (POSIX and flock both), unless the
    // mount serves them (libfuse asks for both by default, the handlers being installed).
    conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
    if (locks) conn->want |= conn->capable & (FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
    conn->max_write = 1024 * 1024;
    conn->max_readahead = 1024 * 1024;
}

// Replies with `size` bytes of `fd` at `offset`, spliced when the kernel allows.
static inline int cfs_reply_fd_data(fuse_req_t req, int fd, off_t offset, size_t size) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = offset;
    return fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

// Writes an incoming buffer vector to `fd` at `offset`; returns bytes written or -errno.
static inline ssize_t cfs_write_buf(struct fuse_bufvec *in, int fd, off_t offset) {
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
    out.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    out.buf[0].fd = fd;
    out.buf[0].pos = offset;
    return fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
}

// A lock request's lock (libfuse made the kernel's a struct flock): `end` inclusive, INT64_MAX
// (the kernel's OFFSET_MAX) for a lock to the end of the file however far it grows.
struct cfs_lock {
    int type;
    int64_t start;
    int64_t end;
    int32_t pid;
};

static inline struct cfs_lock cfs_lock_of(const struct flock *lock) {
    struct cfs_lock made;
    made.type = lock->l_type;
    made.start = lock->l_start;
    made.end = lock->l_len == 0 ? INT64_MAX : lock->l_start + lock->l_len - 1;
    made.pid = lock->l_pid;
    return made;
}

// A GETLK's answer: the lock in the way, or type F_UNLCK for none.
static inline int cfs_reply_lock(fuse_req_t req, int type, int64_t start, int64_t end, int32_t pid) {
    struct flock lock;
    memset(&lock, 0, sizeof(lock));
    lock.l_type = (short)type;
    lock.l_whence = SEEK_SET;
    if (type != F_UNLCK) {
        lock.l_start = start;
        lock.l_len = end == INT64_MAX ? 0 : end - start + 1;
    }
    lock.l_pid = pid;
    return fuse_reply_lock(req, &lock);
}

// The lock owner FLUSH, RELEASE and the lock requests name, and whether a RELEASE drops the
// open's flock lock (the kernel names its owner then).
static inline uint64_t cfs_file_info_lock_owner(const struct fuse_file_info *fi) { return fi->lock_owner; }
static inline int cfs_file_info_flock_release(const struct fuse_file_info *fi) { return fi->flock_release; }

// Open-file flags FUSE passes as they are.
static inline int cfs_file_info_flags(const struct fuse_file_info *fi) { return fi->flags; }
static inline uint64_t cfs_file_info_handle(const struct fuse_file_info *fi) { return fi->fh; }
static inline void cfs_file_info_set(struct fuse_file_info *fi, uint64_t handle, int keep_cache, int direct_io,
                                     int noflush) {
    fi->fh = handle;
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->direct_io = direct_io ? 1 : 0;
    fi->noflush = noflush ? 1 : 0;
}

// An opendir's answer: the kernel may keep the listing (and keep it across opens).
static inline void cfs_file_info_set_directory(struct fuse_file_info *fi, uint64_t handle, int cache_listing) {
    fi->fh = handle;
    fi->cache_readdir = cache_listing ? 1 : 0;
    fi->keep_cache = cache_listing ? 1 : 0;
}

// The directory entry helpers take a name and a stat by pointer.
static inline size_t cfs_add_direntry(fuse_req_t req, char *buf, size_t size, const char *name,
                                      ino_t ino, mode_t mode, off_t next) {
    struct stat st;
    memset(&st, 0, sizeof(st));
    st.st_ino = ino;
    st.st_mode = mode;
    return fuse_add_direntry(req, buf, size, name, &st, next);
}

#endif
