// The kernel's FUSE protocol as this module speaks it past libfuse 3.14: the wire layouts,
// opcodes, flags and ioctls of linux/fuse.h (protocol 7.44) that passthrough.c and ring.c use,
// declared once. Only the parts used; the names say which kernel name each stands for.
#ifndef CFS_FUSE_ABI_H
#define CFS_FUSE_ABI_H
#include <stdint.h>
#include <sys/ioctl.h>

// Every request and reply.
struct cfs_in_header { uint32_t len, opcode; uint64_t unique, nodeid; uint32_t uid, gid, pid; uint16_t extlen, padding; };
struct cfs_out_header { uint32_t len; int32_t error; uint64_t unique; };

// INIT, and kernel passthrough's backing files.
struct cfs_init_in { uint32_t major, minor, max_readahead, flags, flags2; };
struct cfs_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };

enum {
    CFS_FUSE_INIT = 26,
    CFS_FUSE_INIT_EXT = 1u << 30,
    CFS_FUSE_HANDLE_KILLPRIV = 1u << 19,
    CFS_FUSE_HANDLE_KILLPRIV_V2 = 1u << 28,
    CFS_FUSE_PASSTHROUGH_FLAGS2 = 1u << (37 - 32),
    CFS_FUSE_MAX_PAGES = 1u << 22,
    CFS_FUSE_OVER_IO_URING_FLAGS2 = 1u << (41 - 32),
    CFS_FOPEN_PASSTHROUGH = 1u << 7,
    // Offsets in fuse_init_out.
    CFS_INIT_OUT_FLAGS = 12, CFS_INIT_OUT_MAX_WRITE = 20, CFS_INIT_OUT_MAX_PAGES = 28, CFS_INIT_OUT_FLAGS2 = 32,
    CFS_INIT_OUT_MAX_STACK_DEPTH = 36,
};
#define CFS_FUSE_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct cfs_backing_map)
#define CFS_FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

// Notifications the mount sends unasked, past libfuse 3.14: a reply header with no request
// (unique 0) whose error field is the code. INC_EPOCH from Linux 6.16.
enum { CFS_FUSE_NOTIFY_INC_EPOCH = 8 };

// FUSE over io_uring.
struct cfs_ring_ent_in_out { uint64_t flags, commit_id; uint32_t payload_sz, padding; uint64_t reserved; };
struct cfs_ring_header { char in_out[128]; char op_in[128]; struct cfs_ring_ent_in_out ent; };
struct cfs_ring_cmd { uint64_t flags, commit_id; uint16_t qid; uint8_t padding[6]; };
enum { CFS_RING_REGISTER = 1, CFS_RING_COMMIT_AND_FETCH = 2 };

// Opcodes, and the setattr bit, that make a request one that may block (an open's O_TRUNC comes
// from fcntl.h).
enum {
    CFS_OP_SETATTR = 4, CFS_OP_OPEN = 14, CFS_OP_CREATE = 35, CFS_OP_READ = 15, CFS_OP_WRITE = 16, CFS_OP_FSYNC = 20, CFS_OP_FLUSH = 25,
    CFS_OP_FSYNCDIR = 30, CFS_OP_FALLOCATE = 43, CFS_OP_LSEEK = 46, CFS_OP_COPY_FILE_RANGE = 47,
    CFS_OP_SYNCFS = 50, CFS_FATTR_SIZE = 1 << 3,
};

#endif
