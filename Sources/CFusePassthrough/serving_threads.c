// The serving threads' CPU, priority and filesystem context (see ring.c and MountSession).
#define _GNU_SOURCE
#include "../CFuse3/fuse_use_version.h"
#include "ring_internal.h"
#include "fuse_passthrough.h"
#include "ring.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

void cfs_pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    // A CPU this process may not use is not fatal: its queue is served from elsewhere.
    (void)sched_setaffinity(0, sizeof(set), &set);
}

// A queue thread shares its CPU with the programs whose requests it serves. The kernel wakes
// it on the caller's CPU and, once it has replied, wakes the caller while it still runs there:
// the scheduler then moves the caller to the other CPU, which is idle, and a lone program's
// next request goes to that CPU's queue. Each call so crosses CPUs twice, waking an idle one
// each time. A few steps ahead of the caller in priority (nice -5 against 0), the woken queue
// thread runs at once, before the caller has gone to sleep; the reply then finds the caller
// still on its CPU. Lane threads start from their queue thread and keep its value. Without the
// privilege (not root) the value stays as it was.
void cfs_take_nice(struct cfs_ring_queue *queue) {
    struct cfs_ring *ring = queue->ring;
    int running = ring->queue_nice != 0 ? cfs_set_thread_nice(ring->queue_nice) : cfs_thread_nice();
    if (queue->qid == 0) atomic_store(&ring->running_nice, running);
}

int cfs_thread_nice(void) {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);   // Linux: the calling thread's, not the process's
    return errno == 0 ? nice : 0;
}

int cfs_set_thread_nice(int nice) {
    (void)setpriority(PRIO_PROCESS, 0, nice);
    return cfs_thread_nice();
}

int cfs_own_umask_zero(void) {
    if (unshare(CLONE_FS) != 0) return -1;
    return (int)umask(0);
}
