// Kernel passthrough and KILLPRIV_V2 for libfuse 3.14, which cannot negotiate them.
//
// With passthrough (Linux >= 6.9) the kernel serves read, write and mmap of an open file straight
// from a backing file the server registered: the data path runs at the backing filesystem's speed
// and never reaches the daemon. Opens, creations and releases still do, so coordination is
// untouched. The session's device I/O goes through these hooks, which
//   - note whether the kernel's INIT offers FUSE_PASSTHROUGH and, if the mount wants it, add it
//     (and a stacking depth: 1, or 2 over a stacked backing) to libfuse's INIT reply;
//   - add FOPEN_PASSTHROUGH and a backing id to an open or create reply the mount marked;
//   - ask for FUSE_HANDLE_KILLPRIV_V2, also past libfuse 3.14: the kernel then trusts the mount
//     to clear setuid/setgid on writes, truncation and O_TRUNC opens (it does, see
//     Filesystem+Files.swift), and no longer asks for security.capability before every write;
//   - offer FUSE over io_uring when the kernel does and the mount wants it, and hand the replies
//     of requests that came through it to their ring entries (ring.c).
// libfuse answers a request on the thread that read it, so thread-locals carry the marks.
#include "../CFuse3/fuse_use_version.h"
#include "fuse_abi.h"
#include "fuse_passthrough.h"
#include "ring.h"
#include <errno.h>
#include <fuse_lowlevel.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static _Thread_local uint64_t cfs_init_unique;     // the INIT being answered on this thread
static _Thread_local int cfs_init_offers_passthrough;
static _Thread_local int cfs_init_offers_killpriv_v2;
static _Thread_local int cfs_init_wants_passthrough; // the stack depth the mount declares, 0: none
static _Thread_local int cfs_init_offers_ring;
static _Thread_local void *cfs_init_ring_session;   // set by the mount's init callback when it wants the ring
static _Thread_local int cfs_init_ring_lanes_all;   // every request to lane threads (see ring.h)
static _Thread_local int cfs_init_ring_queue_nice;  // the queue threads' nice value (see ring.h)
static _Thread_local int32_t cfs_reply_backing_id;  // set around an open or create reply

static ssize_t cfs_io_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t count = read(fd, buf, len);
    if (count >= (ssize_t)sizeof(struct cfs_in_header)) {
        struct cfs_in_header *header = (struct cfs_in_header *)buf;
        header->opcode = cfs_served_opcode(header->opcode);
    }
    if (count >= (ssize_t)(sizeof(struct cfs_in_header) + sizeof(struct cfs_init_in))) {
        const struct cfs_in_header *header = (const struct cfs_in_header *)buf;
        if (header->opcode == CFS_FUSE_INIT) {
            const struct cfs_init_in *init = (const struct cfs_init_in *)(header + 1);
            cfs_init_unique = header->unique;
            cfs_init_offers_passthrough = (init->flags & CFS_FUSE_INIT_EXT) && (init->flags2 & CFS_FUSE_PASSTHROUGH_FLAGS2);
            cfs_init_offers_killpriv_v2 = (init->flags & CFS_FUSE_HANDLE_KILLPRIV_V2) != 0;
            cfs_init_offers_ring = (init->flags & CFS_FUSE_INIT_EXT) && (init->flags2 & CFS_FUSE_OVER_IO_URING_FLAGS2);
        }
    }
    return count;
}

static ssize_t cfs_io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    int ring_offered = 0;
    if (count >= 2 && iov[0].iov_len >= sizeof(struct cfs_out_header)) {
        const struct cfs_out_header *header = (const struct cfs_out_header *)iov[0].iov_base;
        if (cfs_reply_backing_id > 0 && header->error == 0 && iov[count - 1].iov_len >= 16) {
            // The open arguments end both replies: { fh, open_flags, backing_id }.
            char *end = (char *)iov[count - 1].iov_base + iov[count - 1].iov_len;
            *(uint32_t *)(end - 8) |= CFS_FOPEN_PASSTHROUGH;
            *(int32_t *)(end - 4) = cfs_reply_backing_id;
        } else if (cfs_init_unique != 0 && header->unique == cfs_init_unique) {
            char *out = (char *)iov[1].iov_base;
            if (header->error == 0 && cfs_init_offers_killpriv_v2 && iov[1].iov_len >= CFS_INIT_OUT_FLAGS + 4) {
                uint32_t *flags = (uint32_t *)(out + CFS_INIT_OUT_FLAGS);
                *flags = (*flags & ~CFS_FUSE_HANDLE_KILLPRIV) | CFS_FUSE_HANDLE_KILLPRIV_V2;
            }
            if (header->error == 0 && cfs_init_offers_passthrough && cfs_init_wants_passthrough
                && iov[1].iov_len >= CFS_INIT_OUT_MAX_STACK_DEPTH + 4) {
                *(uint32_t *)(out + CFS_INIT_OUT_FLAGS) |= CFS_FUSE_INIT_EXT;
                *(uint32_t *)(out + CFS_INIT_OUT_FLAGS2) |= CFS_FUSE_PASSTHROUGH_FLAGS2;
                *(uint32_t *)(out + CFS_INIT_OUT_MAX_STACK_DEPTH) = (uint32_t)cfs_init_wants_passthrough;
            }
            if (header->error == 0 && cfs_init_offers_ring && cfs_init_ring_session != NULL
                && iov[1].iov_len >= CFS_INIT_OUT_FLAGS2 + 4) {
                // The kernel's largest request payload: its max_write, or max_pages pages.
                uint32_t flags = *(uint32_t *)(out + CFS_INIT_OUT_FLAGS);
                size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = *(uint16_t *)(out + CFS_INIT_OUT_MAX_PAGES);
                size_t payload = *(uint32_t *)(out + CFS_INIT_OUT_MAX_WRITE);
                if (!(flags & CFS_FUSE_MAX_PAGES) || pages < 32) pages = 32;
                if (payload < pages * page) payload = pages * page;
                if (payload < 8192) payload = 8192;
                if (cfs_ring_prepare(cfs_init_ring_session, fd, payload, cfs_init_ring_lanes_all, cfs_init_ring_queue_nice) == 0) {
                    *(uint32_t *)(out + CFS_INIT_OUT_FLAGS) |= CFS_FUSE_INIT_EXT;
                    *(uint32_t *)(out + CFS_INIT_OUT_FLAGS2) |= CFS_FUSE_OVER_IO_URING_FLAGS2;
                    ring_offered = 1;
                }
            }
            cfs_init_unique = 0;
        }
    }
    if (!ring_offered && cfs_ring_capture(fd, iov, count)) {
        ssize_t total = 0;
        for (int index = 0; index < count; index++) total += (ssize_t)iov[index].iov_len;
        return total;
    }
    ssize_t written = writev(fd, iov, count);
    if (ring_offered) cfs_ring_start(fd, written >= 0);
    return written;
}

static ssize_t cfs_io_splice_receive(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                     unsigned int flags, void *userdata) {
    (void)userdata;
    return syscall(SYS_splice, fdin, offin, fdout, offout, len, flags); // glibc's needs _GNU_SOURCE
}

static ssize_t cfs_io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                  unsigned int flags, void *userdata) {
    (void)userdata;
    return syscall(SYS_splice, fdin, offin, fdout, offout, len, flags);
}

// Puts the hooks on a mounted session's device. Returns 0 or -errno.
int cfs_session_hook_device(void *session) {
    struct fuse_session *se = session;
    static const struct fuse_custom_io io = {
        .writev = cfs_io_writev, .read = cfs_io_read,
        .splice_receive = cfs_io_splice_receive, .splice_send = cfs_io_splice_send,
    };
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

void cfs_want_ring(void *connection, void *session, int lanes_all, int queue_nice) {
    struct fuse_conn_info *conn = connection;
    cfs_init_ring_session = session;
    cfs_init_ring_lanes_all = lanes_all;
    cfs_init_ring_queue_nice = queue_nice;
    // A reply spliced into /dev/fuse cannot answer a request that came through the ring.
    if (session != NULL && cfs_init_offers_ring) conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

// Called from the mount's init callback (on the thread answering INIT).
void cfs_want_passthrough(int stack_depth) { cfs_init_wants_passthrough = stack_depth; }

// Registers `fd` as a backing file: its id (> 0), or -errno (EPERM: passthrough not negotiated).
int32_t cfs_backing_open(int device, int fd) {
    struct cfs_backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int id = ioctl(device, CFS_FUSE_DEV_IOC_BACKING_OPEN, &map);
    return id < 0 ? -errno : id;
}

int cfs_backing_close(int device, int32_t id) {
    uint32_t value = (uint32_t)id;
    return ioctl(device, CFS_FUSE_DEV_IOC_BACKING_CLOSE, &value) < 0 ? -errno : 0;
}

// Open and create replies served by the kernel from backing file `backing_id`.
int cfs_reply_open_backed(void *req, const void *fi, int32_t backing_id) {
    cfs_reply_backing_id = backing_id;
    int result = fuse_reply_open(req, fi);
    cfs_reply_backing_id = 0;
    return result;
}

int cfs_reply_create_backed(void *req, const void *entry, const void *fi, int32_t backing_id) {
    cfs_reply_backing_id = backing_id;
    int result = fuse_reply_create(req, entry, fi);
    cfs_reply_backing_id = 0;
    return result;
}

