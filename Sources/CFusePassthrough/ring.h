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

#endif
