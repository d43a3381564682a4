// Notifications libfuse 3.14 cannot send, written to the device as libfuse writes those it knows:
// a reply header with no request (unique 0) whose error field is the code, then the arguments.
// They never travel through the io_uring queues: /dev/fuse takes them either way.
#include "fuse_abi.h"
#include "fuse_passthrough.h"
#include <errno.h>
#include <unistd.h>

int cfs_notify_increment_epoch(int device) {
    // No arguments.
    struct cfs_out_header header = { .len = sizeof header, .error = CFS_FUSE_NOTIFY_INC_EPOCH, .unique = 0 };
    ssize_t written = write(device, &header, sizeof header);
    if (written < 0) return -errno;
    return written == (ssize_t)sizeof header ? 0 : -EIO;
}
