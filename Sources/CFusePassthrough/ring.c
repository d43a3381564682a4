// FUSE over io_uring for libfuse 3.14 (Linux >= 6.14 with fuse.enable_uring=Y).
//
// Through /dev/fuse, a request wakes whichever daemon thread waits in read(2), on whichever CPU.
// On a virtual machine, waking an idle vCPU for it costs more than the request itself, and the
// daemon's caches are cold there. With io_uring the kernel keeps one queue per CPU and hands a
// request to the queue of the CPU its caller runs on; each queue is served here by a thread
// pinned to that CPU, so the wake-up is local and the caches are warm.
//
// Each ring entry is a header buffer (the request's fuse_in_header and the operation's fixed
// arguments) and a payload buffer (names, write data). libfuse 3.14 only parses contiguous
// requests, so the payload buffer has room in front of it, and the header and arguments are
// copied there: the payload itself is never moved. Replies reach the device hook's writev
// (`cfs_ring_capture`), which copies them into the entry for the kernel to commit.
//
// A request whose coordination waits keeps its entry until it is answered, from another thread.
// The kernel only hands a CPU's requests to that CPU's entries, so a queue registers more
// entries while few are free: the holder's next request (a close) must never wait behind
// requests that wait for it.
//
// A request that may wait long for the disk or the network (fsync, fallocate, a truncation or a
// truncating open, a read or write the kernel did not pass through) is served by a lane thread
// of its queue, pinned to the same CPU: served on the queue thread, it would hold up every later
// request of that CPU, from any program, for as long as it waits. Unlinking a big file frees
// nothing then: the mount's own descriptor of the inode keeps it, and the blocks go when that
// descriptor closes, at the kernel's FORGET, which comes through /dev/fuse.
//
// On a backing directory whose filesystem is not local (NFS, SMB, FUSE, ...), any request may
// wait on the network: a lookup or an open on a stalled server would hold up every later request
// of its CPU. There the lane threads serve every request (`lanes_all`); a round trip to the
// server costs more than the hand-over. When such a filesystem is mounted inside a local backing
// directory, only the requests about its nodes, and about the directory it is mounted in, go to
// the lanes (`cfs_ring_lane_node`): the hand-over would slow every local stat down.
//
// Interrupts, forgets and notifications still go through /dev/fuse and libfuse's own loop.
#define _GNU_SOURCE
#include "../CFuse3/fuse_use_version.h"
#include "ring_internal.h"
#include "fuse_passthrough.h"
#include "ring.h"
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

// The process's rings, found by their device descriptor from the writev hook.
pthread_rwlock_t cfs_rings_lock = PTHREAD_RWLOCK_INITIALIZER;
struct cfs_ring *cfs_rings;
// How many there are: a reply through /dev/fuse takes no lock while there are none.
_Atomic int cfs_ring_count;
// The entry whose request this thread is serving right now (queue threads only).
_Thread_local struct cfs_ring_entry *cfs_serving;
// Entries answered on their own queue's thread, to commit after the request returns.
_Thread_local struct cfs_ring_entry *cfs_answered_here;
_Thread_local struct cfs_ring_queue *cfs_own_queue;


struct io_uring_sqe *cfs_sqe(struct cfs_ring_queue *queue) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&queue->uring);
    if (sqe == NULL) {
        io_uring_submit(&queue->uring);
        sqe = io_uring_get_sqe(&queue->uring);
    }
    return sqe;
}

int cfs_submit_command(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry, uint32_t command,
                       uint64_t commit_id) {
    struct io_uring_sqe *sqe = cfs_sqe(queue);
    if (sqe == NULL) return -EBUSY;
    memset(sqe, 0, 128);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = queue->ring->device;
    sqe->cmd_op = command;
    if (command == CFS_RING_REGISTER) {
        sqe->addr = (uint64_t)(uintptr_t)entry->iov;
        sqe->len = 2;
    }
    struct cfs_ring_cmd *cmd = (struct cfs_ring_cmd *)sqe->cmd;
    cmd->qid = (uint16_t)queue->qid;
    cmd->commit_id = commit_id;
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)entry);
    queue->in_flight++;
    return 0;
}

void cfs_arm_eventfd(struct cfs_ring_queue *queue) {
    struct io_uring_sqe *sqe = cfs_sqe(queue);
    if (sqe == NULL) return;
    // A read rather than a poll: the wake-up's count is consumed in the ring, without a read(2).
    io_uring_prep_read(sqe, queue->eventfd, &queue->eventfd_count, sizeof(queue->eventfd_count), 0);
    io_uring_sqe_set_data64(sqe, EVENTFD_TAG);
}

// A new entry, registered with the kernel. 0 or -errno.
int cfs_add_entry(struct cfs_ring_queue *queue) {
    struct cfs_ring_entry *entry = calloc(1, sizeof(*entry));
    if (entry == NULL) return -ENOMEM;
    if (posix_memalign((void **)&entry->header, 4096, sizeof(struct cfs_ring_header)) != 0) {
        free(entry);
        return -ENOMEM;
    }
    // Large: malloc maps it, and only the pages a request touches become resident.
    entry->buffer = malloc(HEADROOM + queue->ring->payload_size);
    if (entry->buffer == NULL) {
        free(entry->header);
        free(entry);
        return -ENOMEM;
    }
    entry->queue = queue;
    entry->iov[0] = (struct iovec){ entry->header, sizeof(struct cfs_ring_header) };
    entry->iov[1] = (struct iovec){ entry->buffer + HEADROOM, queue->ring->payload_size };
    pthread_mutex_lock(&queue->lock);
    struct cfs_ring_entry **grown = realloc(queue->entries, (queue->count + 1) * sizeof(*grown));
    if (grown == NULL) {
        pthread_mutex_unlock(&queue->lock);
        free(entry->buffer);
        free(entry->header);
        free(entry);
        return -ENOMEM;
    }
    queue->entries = grown;
    queue->entries[queue->count++] = entry;
    pthread_mutex_unlock(&queue->lock);
    return cfs_submit_command(queue, entry, CFS_RING_REGISTER, 0);
}

void cfs_free_queue(struct cfs_ring_queue *queue) {
    for (size_t index = 0; index < queue->count; index++) {
        free(queue->entries[index]->buffer);
        free(queue->entries[index]->header);
        free(queue->entries[index]);
    }
    free(queue->entries);
    queue->entries = NULL;
    queue->count = 0;
    if (queue->eventfd >= 0) close(queue->eventfd);
    queue->eventfd = -1;
    pthread_mutex_destroy(&queue->lock);
    pthread_mutex_destroy(&queue->lane.lock);
    pthread_cond_destroy(&queue->lane.wake);
}

int cfs_ring_prepare(void *session, int device, size_t payload_size, int lanes_all, int queue_nice) {
    struct cfs_ring *ring = calloc(1, sizeof(*ring));
    if (ring == NULL) return -ENOMEM;
    ring->session = session;
    ring->lanes_all = lanes_all != 0;
    ring->queue_nice = queue_nice;
    ring->device = device;
    ring->payload_size = payload_size;
    ring->queue_count = (size_t)get_nprocs_conf();
    ring->queues = calloc(ring->queue_count, sizeof(struct cfs_ring_queue));
    if (ring->queues == NULL) { free(ring); return -ENOMEM; }
    sem_init(&ring->started, 0, 0);
    sem_init(&ring->go, 0, 0);
    size_t started = 0;
    int error = 0;
    for (; started < ring->queue_count; started++) {
        struct cfs_ring_queue *queue = &ring->queues[started];
        queue->ring = ring;
        queue->qid = (int)started;
        queue->eventfd = -1;
        pthread_mutex_init(&queue->lock, NULL);
        pthread_mutex_init(&queue->lane.lock, NULL);
        pthread_cond_init(&queue->lane.wake, NULL);
        if ((error = -pthread_create(&queue->thread, NULL, cfs_ring_thread, queue)) != 0) break;
    }
    for (size_t index = 0; index < started; index++) sem_wait(&ring->started);
    for (size_t index = 0; index < started && error == 0; index++) error = ring->queues[index].setup_error;
    if (error != 0 || started < ring->queue_count) {
        atomic_store(&ring->failed, 1);
        for (size_t index = 0; index < started; index++) sem_post(&ring->go);
        for (size_t index = 0; index < started; index++) pthread_join(ring->queues[index].thread, NULL);
        for (size_t index = 0; index < ring->queue_count; index++) {
            if (index >= started) {
                pthread_mutex_destroy(&ring->queues[index].lock);
                pthread_mutex_destroy(&ring->queues[index].lane.lock);
                pthread_cond_destroy(&ring->queues[index].lane.wake);
            } else {
                cfs_free_queue(&ring->queues[index]);
            }
        }
        free(ring->queues);
        free(ring);
        return error != 0 ? error : -EAGAIN;
    }
    pthread_rwlock_wrlock(&cfs_rings_lock);
    ring->next = cfs_rings;
    cfs_rings = ring;
    atomic_fetch_add(&cfs_ring_count, 1);
    pthread_rwlock_unlock(&cfs_rings_lock);
    return 0;
}

struct cfs_ring *cfs_ring_of(int device) {
    for (struct cfs_ring *ring = cfs_rings; ring != NULL; ring = ring->next) {
        if (ring->device == device) return ring;
    }
    return NULL;
}

void cfs_ring_start(int device, int negotiated) {
    pthread_rwlock_rdlock(&cfs_rings_lock);
    struct cfs_ring *ring = cfs_ring_of(device);
    pthread_rwlock_unlock(&cfs_rings_lock);
    if (ring == NULL) return;
    if (!negotiated) atomic_store(&ring->failed, 1);
    for (size_t index = 0; index < ring->queue_count; index++) sem_post(&ring->go);
    if (!negotiated) cfs_ring_stop(device);
}

void cfs_ring_stop(int device) {
    pthread_rwlock_wrlock(&cfs_rings_lock);
    struct cfs_ring **link = &cfs_rings;
    while (*link != NULL && (*link)->device != device) link = &(*link)->next;
    struct cfs_ring *ring = *link;
    if (ring != NULL) {
        *link = ring->next;
        atomic_fetch_sub(&cfs_ring_count, 1);
    }
    pthread_rwlock_unlock(&cfs_rings_lock);
    if (ring == NULL) return;
    atomic_store(&ring->stopping, 1);
    for (size_t index = 0; index < ring->queue_count; index++) {
        uint64_t one = 1;
        ssize_t written = write(ring->queues[index].eventfd, &one, sizeof(one));
        (void)written;
    }
    // Once its thread has ended, the kernel writes no more into a queue's buffers: requests are
    // copied to them only in that thread's context.
    for (size_t index = 0; index < ring->queue_count; index++) pthread_join(ring->queues[index].thread, NULL);
    // The queue threads hand nothing more to the lanes, which end once they have served what
    // they were handed (those replies stay in entries nobody commits: the connection has ended).
    for (size_t index = 0; index < ring->queue_count; index++) {
        struct cfs_ring_lane *lane = &ring->queues[index].lane;
        pthread_mutex_lock(&lane->lock);
        pthread_cond_broadcast(&lane->wake);
        size_t threads = lane->threads;
        pthread_mutex_unlock(&lane->lock);
        for (size_t thread = 0; thread < threads; thread++) pthread_join(lane->ids[thread], NULL);
    }
    for (size_t index = 0; index < ring->queue_count; index++) cfs_free_queue(&ring->queues[index]);
    _Atomic(uint64_t) *_Atomic *pages = atomic_load(&ring->lane_pages);
    if (pages != NULL) {
        for (size_t page = 0; page < LANE_PAGES; page++) free((void *)atomic_load(&pages[page]));
        free((void *)pages);
    }
    free(ring->queues);
    free(ring);
}

struct cfs_ring_facts cfs_ring_facts(int device) {
    struct cfs_ring_facts facts = { 0 };
    pthread_rwlock_rdlock(&cfs_rings_lock);
    struct cfs_ring *ring = cfs_ring_of(device);
    if (ring != NULL) {
        int serving = !atomic_load(&ring->failed);
        facts.queues = serving ? ring->queue_count : 0;
        facts.lanes_all = serving && atomic_load(&ring->lanes_all);
        facts.lane_nodes = atomic_load_explicit(&ring->lane_nodes, memory_order_relaxed);
        facts.served = atomic_load_explicit(&ring->served, memory_order_relaxed);
        facts.laned = atomic_load_explicit(&ring->laned, memory_order_relaxed);
        facts.direct_reads = atomic_load_explicit(&ring->direct_reads, memory_order_relaxed);
        facts.queue_nice = serving ? atomic_load_explicit(&ring->running_nice, memory_order_relaxed) : 0;
    }
    pthread_rwlock_unlock(&cfs_rings_lock);
    return facts;
}

// Hands the request in `entry` to libfuse, as if read from /dev/fuse (on its queue's thread or
// a lane thread).
void cfs_process(struct cfs_ring_entry *entry) {
    struct cfs_ring *ring = entry->queue->ring;
    struct cfs_in_header in;
    memcpy(&in, entry->header->in_out, sizeof(in));
    in.opcode = cfs_served_opcode(in.opcode);
    uint32_t payload = entry->header->ent.payload_sz;
    // What the kernel put in the header area: the request's length less its header and payload.
    size_t arguments = in.len >= sizeof(in) + payload ? in.len - sizeof(in) - payload : SIZE_MAX;
    if (arguments > sizeof(entry->header->op_in) || payload > ring->payload_size || in.unique == 0) {
        // Not a request this transport understands: answer EIO rather than guess.
        struct cfs_out_header out = { sizeof(out), -EIO, in.unique };
        struct iovec iov = { &out, sizeof(out) };
        atomic_store(&entry->awaiting, in.unique);
        cfs_serving = entry;
        cfs_ring_capture(ring->device, &iov, 1);
        cfs_serving = NULL;
        return;
    }
    char *start = entry->buffer + HEADROOM - arguments - sizeof(in);
    memcpy(start + sizeof(in), entry->header->op_in, arguments);
    memcpy(start, &in, sizeof(in));
    struct fuse_buf buf = { .size = sizeof(in) + arguments + payload, .flags = 0, .mem = start, .fd = -1, .pos = 0 };
    atomic_store(&entry->awaiting, in.unique);
    cfs_serving = entry;
    fuse_session_process_buf(ring->session, &buf);
    cfs_serving = NULL;
}

// Serves an entry the kernel just filled: counted here, on the queue thread.
void cfs_serve(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry) {
    queue->busy++;
    atomic_fetch_add_explicit(&queue->ring->served, 1, memory_order_relaxed);
    if (atomic_load_explicit(&queue->ring->lanes_all, memory_order_relaxed) || cfs_may_block(entry)
        || cfs_lanes_node(queue->ring, entry)) {
        // Counted first: the lane may serve it (a read of the counters, say) before the push returns.
        atomic_fetch_add_explicit(&queue->ring->laned, 1, memory_order_relaxed);
        if (cfs_lane_push(queue, entry) == 0) return;
        atomic_fetch_sub_explicit(&queue->ring->laned, 1, memory_order_relaxed);
    }
    cfs_process(entry);
}

int cfs_ring_serving(void) { return cfs_serving != NULL; }

void *cfs_ring_thread(void *arg) {
    struct cfs_ring_queue *queue = arg;
    struct cfs_ring *ring = queue->ring;
    char name[16];
    snprintf(name, sizeof(name), "coordfs-ring%d", queue->qid);
    pthread_setname_np(pthread_self(), name);
    cfs_pin(queue->qid);
    cfs_take_nice(queue);
    // Only this thread submits, and the kernel's completions (each new request) wait for it to
    // ask for them. Otherwise each one is task work signalled to this thread, and a system call
    // it is in that waits interruptibly (an open on a network or FUSE backing) failed with
    // EINTR whenever a request for this queue came in meanwhile.
    struct io_uring_params params = { 0 };
    params.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    params.cq_entries = CQ_SIZE;
    int error = io_uring_queue_init_params(SQ_SIZE, &queue->uring, &params);
    if (error == 0) {
        queue->eventfd = eventfd(0, EFD_CLOEXEC);
        if (queue->eventfd < 0) { error = -errno; io_uring_queue_exit(&queue->uring); }
    }
    queue->setup_error = error;
    sem_post(&ring->started);
    if (error != 0) return NULL;
    sem_wait(&ring->go);
    if (atomic_load(&ring->failed)) { io_uring_queue_exit(&queue->uring); return NULL; }
    cfs_own_queue = queue;
    for (int index = 0; index < FIRST_ENTRIES; index++) cfs_add_entry(queue);
    cfs_arm_eventfd(queue);
    int ended = 0;
    while (!ended) {
        int waited = io_uring_submit_and_wait(&queue->uring, 1);
        if (waited < 0 && waited != -EINTR && waited != -EAGAIN && waited != -EBUSY) break;
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&queue->uring, head, cqe) {
            seen++;
            uint64_t data = io_uring_cqe_get_data64(cqe);
            if (data == EVENTFD_TAG) {
                if (atomic_load(&ring->stopping)) { ended = 1; continue; }
                pthread_mutex_lock(&queue->lock);
                struct cfs_ring_entry *answered = queue->answered;
                queue->answered = NULL;
                pthread_mutex_unlock(&queue->lock);
                cfs_commit_list(queue, answered);
                cfs_arm_eventfd(queue);
                continue;
            }
            struct cfs_ring_entry *entry = (struct cfs_ring_entry *)(uintptr_t)data;
            queue->in_flight--;
            if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
                // Registered before the kernel finished INIT: again, shortly.
                struct timespec pause = { 0, 1000000 };
                nanosleep(&pause, NULL);
                cfs_submit_command(queue, entry, CFS_RING_REGISTER, 0);
                continue;
            }
            if (cqe->res < 0) {
                // The connection ended (unmounted or aborted): nothing more comes.
                if (queue->in_flight == 0) ended = 1;
                continue;
            }
            cfs_serve(queue, entry);
            struct cfs_ring_entry *answered = cfs_answered_here;
            cfs_answered_here = NULL;
            cfs_commit_list(queue, answered);
        }
        io_uring_cq_advance(&queue->uring, seen);
        // Requests that wait for coordination keep their entries: keep some free.
        while (!ended && queue->count - queue->busy < SPARE_ENTRIES && queue->count < MOST_ENTRIES) {
            if (cfs_add_entry(queue) != 0) break;
        }
        if (atomic_load(&ring->stopping)) ended = 1;
    }
    cfs_own_queue = NULL;
    io_uring_queue_exit(&queue->uring);
    return NULL;
}
