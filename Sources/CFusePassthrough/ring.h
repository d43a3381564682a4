// The io_uring transport (ring.c), as the device hooks (passthrough.c) use it.
#ifndef COORDFS_RING_H
#define COORDFS_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/// Creates a queue thread and io_uring per CPU for `session` on `device`, before INIT is
/// answered: offering the transport to the kernel commits the mount to serving it. With
/// `lanes_all`, lane threads serve every request, not only those that may block. The queue
/// threads set their nice value to `queue_nice` (0: left as it is). 0 or -errno.
int cfs_ring_prepare(void *session, int device, size_t payload_size, int lanes_all, int queue_nice);
/// After INIT was answered: the queues register their entries, or (not negotiated) end.
void cfs_ring_start(int device, int negotiated);
/// From the writev hook: 1 when the reply was for a ring entry and is now in it.
int cfs_ring_capture(int device, const struct iovec *iov, int count);

/// The opcode a request is handed to libfuse with. FUSE_TMPFILE (51: open(2) with O_TMPFILE),
/// which libfuse 3.14 does not know and would refuse (the kernel then says EOPNOTSUPP), carries
/// what FUSE_CREATE (35) carries, for a name no create can have: "/". Handed over as a create,
/// it reaches the mount's create, which tells it by that name (`Filesystem.tmpfile`); the
/// reply is a create's too. Both transports ask here.
static inline uint32_t cfs_served_opcode(uint32_t opcode) { return opcode == 51 ? 35 : opcode; }

#endif
