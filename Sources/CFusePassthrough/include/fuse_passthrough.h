// Kernel passthrough for libfuse 3.14 (see passthrough.c). Pointers are libfuse's own types
// (struct fuse_session, fuse_req_t, struct fuse_file_info, struct fuse_entry_param), passed
// untyped so that this module does not declare libfuse's types a second time.
#ifndef COORDFS_FUSE_PASSTHROUGH_H
#define COORDFS_FUSE_PASSTHROUGH_H

#include <stddef.h>
#include <stdint.h>

/// Puts the passthrough hooks on a mounted session's device. 0 or -errno.
int cfs_session_hook_device(void *session);
/// From the mount's init callback: the stack depth to declare when asking the kernel for
/// passthrough (1, or 2 over a backing that is itself stacked on another filesystem), 0 for no
/// passthrough. The kernel refuses (ELOOP) backing files of a filesystem as deep as the mount.
void cfs_want_passthrough(int stack_depth);
/// From the mount's init callback (`connection`: its struct fuse_conn_info): the session to serve
/// through io_uring when the kernel offers it, or NULL for none; `lanes_all` nonzero when any
/// request may block for long (a backing directory on the network): then every request is
/// served by a lane thread, and none holds up its CPU's queue. The queue threads (and the lane
/// threads they start) run at `queue_nice` where the process may set it (see ring.c).
void cfs_want_ring(void *connection, void *session, int lanes_all, int queue_nice);
/// The io_uring transport of the session on `device`, for its statistics.
struct cfs_ring_facts {
    size_t queues;          // serving it (0: requests come through /dev/fuse)
    uint64_t served;        // requests the queues have taken
    uint64_t laned;         // of those, served by lane threads
    uint64_t direct_reads;  // READs answered by reading straight into their entry
    int lanes_all;          // every request goes to a lane thread
    uint64_t lane_nodes;    // nodes whose requests go to a lane thread (`cfs_ring_lane_node`)
    int queue_nice;         // the nice value the queue threads run at
};
struct cfs_ring_facts cfs_ring_facts(int device);
/// The calling thread's nice value (on Linux each thread has its own), 0 when unreadable.
int cfs_thread_nice(void);
/// Sets the calling thread's nice value where the process may (below 0 needs CAP_SYS_NICE); the
/// threads it starts from now on inherit it. Returns the value it runs at afterwards.
int cfs_set_thread_nice(int nice);
/// Gives the calling thread a filesystem context (umask, cwd) of its own, shared with the
/// threads it starts from now on, with umask 0. Returns the umask it had, or -1 (unchanged).
int cfs_own_umask_zero(void);
/// From now on, lane threads serve the requests of the session on `device` about node `nodeid`
/// (it lies on, or a directory holding a mount of, a filesystem that may keep a request long).
/// No ring: nothing happens.
void cfs_ring_lane_node(int device, uint64_t nodeid);
/// Stops the io_uring queues of `device` before its session is destroyed (none: nothing happens).
void cfs_ring_stop(int device);
/// Whether the calling thread is serving a request from an io_uring queue (a queue or lane
/// thread, within the request), not one read from /dev/fuse.
int cfs_ring_serving(void);
/// Answers the READ request `req` (a fuse_req_t) that this thread serves from an io_uring entry
/// with up to `size` bytes of `fd` at `offset`, read straight into the entry. 1 when answered,
/// 0 when the thread serves no ring entry (reply as usual), -errno when the read failed and
/// nothing was answered.
int cfs_ring_reply_read(void *req, int fd, int64_t offset, size_t size);
/// Registers `fd` as a backing file of the session on `device`: its id (> 0), or -errno.
int32_t cfs_backing_open(int device, int fd);
int cfs_backing_close(int device, int32_t id);
/// fuse_reply_open and fuse_reply_create, served by the kernel from backing file `backing_id`.
int cfs_reply_open_backed(void *req, const void *fi, int32_t backing_id);
int cfs_reply_create_backed(void *req, const void *entry, const void *fi, int32_t backing_id);

/// Makes every name the kernel keeps of the session on `device` stale at once, positive and
/// negative alike (FUSE_NOTIFY_INC_EPOCH): each is looked up again at its next use. 0, or
/// -errno (-EINVAL where the kernel does not know the notification).
int cfs_notify_increment_epoch(int device);

#endif
