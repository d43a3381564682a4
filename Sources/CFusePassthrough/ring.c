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
#define FUSE_USE_VERSION 312
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

// Wire layouts of the io_uring transport (linux/fuse.h, 7.42).
struct cfs_ring_ent_in_out { uint64_t flags, commit_id; uint32_t payload_sz, padding; uint64_t reserved; };
struct cfs_ring_header { char in_out[128]; char op_in[128]; struct cfs_ring_ent_in_out ent; };
struct cfs_ring_cmd { uint64_t flags, commit_id; uint16_t qid; uint8_t padding[6]; };
enum { CFS_RING_REGISTER = 1, CFS_RING_COMMIT_AND_FETCH = 2 };
struct cfs_in_header { uint32_t len, opcode; uint64_t unique, nodeid; uint32_t uid, gid, pid; uint16_t extlen, padding; };
struct cfs_out_header { uint32_t len; int32_t error; uint64_t unique; };

enum {
    HEADROOM = 256,             // room for fuse_in_header (40) and the fixed arguments (<= 128)
    FIRST_ENTRIES = 8,          // per queue at the start
    MOST_ENTRIES = 1024,        // per queue: requests waiting for coordination at once
    SPARE_ENTRIES = 4,          // free entries a queue keeps while it can grow
    SQ_SIZE = 256,
    CQ_SIZE = 4096,             // > MOST_ENTRIES + the eventfd's
    LANE_MOST = 8,              // per queue: requests that may block, served at once
    LANE_PAGE_BITS = 16,        // node ids per page of the lane map: 2^16 (8 KiB of bits)
    LANE_PAGES = 1 << 16,       // pages: node ids below 2^32 are mapped, larger ones all lane
};

// Opcodes (linux/fuse.h) and the setattr bit that make a request one that may block (an open's
// O_TRUNC comes from fcntl.h).
enum {
    CFS_OP_SETATTR = 4, CFS_OP_OPEN = 14, CFS_OP_CREATE = 35, CFS_OP_READ = 15, CFS_OP_WRITE = 16, CFS_OP_FSYNC = 20, CFS_OP_FLUSH = 25,
    CFS_OP_FSYNCDIR = 30, CFS_OP_FALLOCATE = 43, CFS_OP_LSEEK = 46, CFS_OP_COPY_FILE_RANGE = 47,
    CFS_OP_SYNCFS = 50, CFS_FATTR_SIZE = 1 << 3,
};
#define EVENTFD_TAG ((uint64_t)1)

struct cfs_ring_queue;

struct cfs_ring_entry {
    struct cfs_ring_queue *queue;
    struct cfs_ring_header *header;
    char *buffer;                 // HEADROOM bytes, then the payload
    struct iovec iov[2];
    _Atomic uint64_t awaiting;    // the unique of the request it serves; 0 while none
    struct cfs_ring_entry *next;  // in a list of entries to commit
};

// Threads of one queue for the requests that may block, started as they are needed.
struct cfs_ring_lane {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct cfs_ring_entry *head, *tail;   // waiting for a lane thread
    size_t waiting, idle, threads;
    pthread_t ids[LANE_MOST];
};

struct cfs_ring_queue {
    struct cfs_ring *ring;
    int qid;
    struct io_uring uring;
    int eventfd;
    uint64_t eventfd_count;       // what the armed read of `eventfd` reads into
    pthread_t thread;
    pthread_mutex_t lock;         // the entries array (read by other threads) and `answered`
    struct cfs_ring_entry **entries;
    size_t count;
    struct cfs_ring_entry *answered;  // answered on other threads, to commit
    size_t busy;                  // handed to the daemon and not yet committed (queue thread only)
    size_t in_flight;             // commands the kernel holds (queue thread only)
    int setup_error;
    struct cfs_ring_lane lane;
};

struct cfs_ring {
    struct fuse_session *session;
    int device;
    size_t payload_size;
    size_t queue_count;
    struct cfs_ring_queue *queues;
    sem_t started;                // each queue thread posts once its io_uring exists (or failed)
    sem_t go;                     // posted per queue once INIT has been answered
    _Atomic int lanes_all;        // every request to a lane thread, not only those that may block
    int queue_nice;               // asked for the queue threads (0: left as the process's)
    _Atomic int running_nice;     // what the first queue thread runs at
    // Nodes whose requests go to a lane thread: one bit per node id, in pages made as needed
    // (NULL until a first node is marked). Read without a lock; freed when the ring stops.
    _Atomic(_Atomic(uint64_t) *) *_Atomic lane_pages;
    _Atomic uint64_t lane_nodes;  // nodes marked
    _Atomic int stopping;
    _Atomic int failed;
    _Atomic uint64_t served;
    _Atomic uint64_t laned;       // of those, served by lane threads
    _Atomic uint64_t direct_reads; // READs answered straight into their entry (cfs_ring_reply_read)
    struct cfs_ring *next;        // in the list of rings
};

// The process's rings, found by their device descriptor from the writev hook.
static pthread_rwlock_t cfs_rings_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct cfs_ring *cfs_rings;
// How many there are: a reply through /dev/fuse takes no lock while there are none.
static _Atomic int cfs_ring_count;
// The entry whose request this thread is serving right now (queue threads only).
static _Thread_local struct cfs_ring_entry *cfs_serving;
// Entries answered on their own queue's thread, to commit after the request returns.
static _Thread_local struct cfs_ring_entry *cfs_answered_here;
static _Thread_local struct cfs_ring_queue *cfs_own_queue;

static void *cfs_ring_thread(void *arg);
static void *cfs_lane_thread(void *arg);

static struct io_uring_sqe *cfs_sqe(struct cfs_ring_queue *queue) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&queue->uring);
    if (sqe == NULL) {
        io_uring_submit(&queue->uring);
        sqe = io_uring_get_sqe(&queue->uring);
    }
    return sqe;
}

static int cfs_submit_command(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry, uint32_t command,
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

static void cfs_arm_eventfd(struct cfs_ring_queue *queue) {
    struct io_uring_sqe *sqe = cfs_sqe(queue);
    if (sqe == NULL) return;
    // A read rather than a poll: the wake-up's count is consumed in the ring, without a read(2).
    io_uring_prep_read(sqe, queue->eventfd, &queue->eventfd_count, sizeof(queue->eventfd_count), 0);
    io_uring_sqe_set_data64(sqe, EVENTFD_TAG);
}

// A new entry, registered with the kernel. 0 or -errno.
static int cfs_add_entry(struct cfs_ring_queue *queue) {
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

static void cfs_free_queue(struct cfs_ring_queue *queue) {
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

static struct cfs_ring *cfs_ring_of(int device) {
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

// The word of its page that holds `nodeid`'s bit in the lane map.
static size_t cfs_lane_word(uint64_t nodeid) { return (size_t)((nodeid & ((1 << LANE_PAGE_BITS) - 1)) >> 6); }

// Marks `nodeid` in the lane map, making its pages on first use. 1 when it was not marked.
static int cfs_mark_lane_node(struct cfs_ring *ring, uint64_t nodeid) {
    if (nodeid >> LANE_PAGE_BITS >= LANE_PAGES) {             // beyond the map: lane everything
        atomic_store(&ring->lanes_all, 1);
        return 0;
    }
    _Atomic(uint64_t) *_Atomic *pages = atomic_load(&ring->lane_pages);
    if (pages == NULL) {
        _Atomic(uint64_t) *_Atomic *made = calloc(LANE_PAGES, sizeof(*made));
        if (made == NULL) { atomic_store(&ring->lanes_all, 1); return 0; }
        if (!atomic_compare_exchange_strong(&ring->lane_pages, &pages, made)) free((void *)made);
        else pages = made;
    }
    _Atomic(uint64_t) *_Atomic *slot = &pages[nodeid >> LANE_PAGE_BITS];
    _Atomic(uint64_t) *page = atomic_load(slot);
    if (page == NULL) {
        _Atomic(uint64_t) *made = calloc((1 << LANE_PAGE_BITS) / 64, sizeof(*made));
        if (made == NULL) { atomic_store(&ring->lanes_all, 1); return 0; }
        if (!atomic_compare_exchange_strong(slot, &page, made)) free((void *)made);
        else page = made;
    }
    uint64_t bit = (uint64_t)1 << (nodeid & 63);
    uint64_t before = atomic_fetch_or(&page[cfs_lane_word(nodeid)], bit);
    return (before & bit) == 0;
}

void cfs_ring_lane_node(int device, uint64_t nodeid) {
    pthread_rwlock_rdlock(&cfs_rings_lock);
    struct cfs_ring *ring = cfs_ring_of(device);
    if (ring != NULL && cfs_mark_lane_node(ring, nodeid)) atomic_fetch_add(&ring->lane_nodes, 1);
    pthread_rwlock_unlock(&cfs_rings_lock);
}

// Whether the request in `entry` is about a node marked for the lanes.
static int cfs_lanes_node(struct cfs_ring *ring, const struct cfs_ring_entry *entry) {
    _Atomic(uint64_t) *_Atomic *pages = atomic_load_explicit(&ring->lane_pages, memory_order_acquire);
    if (pages == NULL) return 0;                              // nothing marked: most mounts
    struct cfs_in_header in;
    memcpy(&in, entry->header->in_out, sizeof(in));
    if (in.nodeid >> LANE_PAGE_BITS >= LANE_PAGES) return 0;  // (lanes_all covers those)
    _Atomic(uint64_t) *page = atomic_load_explicit(&pages[in.nodeid >> LANE_PAGE_BITS], memory_order_acquire);
    if (page == NULL) return 0;
    uint64_t word = atomic_load_explicit(&page[cfs_lane_word(in.nodeid)], memory_order_relaxed);
    return (word >> (in.nodeid & 63)) & 1;
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

// The reply's length in its entry: the header's and the kernel's count of payload bytes.
static void cfs_set_reply_size(struct cfs_ring_entry *entry, size_t size) {
    ((struct cfs_out_header *)entry->header->in_out)->len = (uint32_t)(sizeof(struct cfs_out_header) + size);
    entry->header->ent.payload_sz = (uint32_t)size;
}

// Copies a reply into `entry` for the kernel to commit.
static void cfs_copy_reply(struct cfs_ring_entry *entry, const struct iovec *iov, int count) {
    char *payload = entry->buffer + HEADROOM;
    size_t limit = entry->queue->ring->payload_size, size = 0;
    int32_t error = 0;
    memcpy(entry->header->in_out, iov[0].iov_base, sizeof(struct cfs_out_header));
    for (int index = 0; index < count; index++) {
        const char *base = iov[index].iov_base;
        size_t length = iov[index].iov_len;
        if (index == 0) { base += sizeof(struct cfs_out_header); length -= sizeof(struct cfs_out_header); }
        if (size + length > limit) { error = -EIO; break; }
        memcpy(payload + size, base, length);
        size += length;
    }
    struct cfs_out_header *out = (struct cfs_out_header *)entry->header->in_out;
    if (error != 0) { out->error = error; size = 0; }
    cfs_set_reply_size(entry, size);
}

// An entry holds its reply: its queue thread commits it, after the request in hand when
// answered there, otherwise when woken through the queue's eventfd.
static void cfs_answered(struct cfs_ring_entry *entry) {
    struct cfs_ring_queue *queue = entry->queue;
    if (cfs_own_queue == queue) {
        entry->next = cfs_answered_here;
        cfs_answered_here = entry;
        return;
    }
    pthread_mutex_lock(&queue->lock);
    entry->next = queue->answered;
    queue->answered = entry;
    pthread_mutex_unlock(&queue->lock);
    uint64_t one = 1;
    ssize_t written = write(queue->eventfd, &one, sizeof(one));
    (void)written;
}

int cfs_ring_capture(int device, const struct iovec *iov, int count) {
    if (count < 1 || iov[0].iov_len < sizeof(struct cfs_out_header)) return 0;
    uint64_t unique = ((const struct cfs_out_header *)iov[0].iov_base)->unique;
    if (unique == 0) return 0;  // a notification
    struct cfs_ring_entry *entry = cfs_serving;
    uint64_t expected = unique;
    if (entry != NULL && atomic_compare_exchange_strong(&entry->awaiting, &expected, 0)) {
        cfs_copy_reply(entry, iov, count);
        cfs_answered(entry);
        return 1;
    }
    // Answered later (a wait for coordination ended), from any thread.
    if (atomic_load_explicit(&cfs_ring_count, memory_order_relaxed) == 0) return 0;
    pthread_rwlock_rdlock(&cfs_rings_lock);
    struct cfs_ring *ring = cfs_ring_of(device);
    entry = NULL;
    for (size_t q = 0; ring != NULL && q < ring->queue_count && entry == NULL; q++) {
        struct cfs_ring_queue *queue = &ring->queues[q];
        pthread_mutex_lock(&queue->lock);
        for (size_t index = 0; index < queue->count; index++) {
            expected = unique;
            if (atomic_compare_exchange_strong(&queue->entries[index]->awaiting, &expected, 0)) {
                entry = queue->entries[index];
                break;
            }
        }
        pthread_mutex_unlock(&queue->lock);
    }
    if (entry != NULL) {
        cfs_copy_reply(entry, iov, count);
        cfs_answered(entry);
    }
    pthread_rwlock_unlock(&cfs_rings_lock);
    return entry != NULL;
}

static void cfs_commit_list(struct cfs_ring_queue *queue, struct cfs_ring_entry *list) {
    while (list != NULL) {
        struct cfs_ring_entry *entry = list;
        list = entry->next;
        entry->next = NULL;
        queue->busy--;
        uint64_t unique = ((struct cfs_out_header *)entry->header->in_out)->unique;
        cfs_submit_command(queue, entry, CFS_RING_COMMIT_AND_FETCH, unique);
    }
}

// Hands the request in `entry` to libfuse, as if read from /dev/fuse (on its queue's thread or
// a lane thread).
static void cfs_process(struct cfs_ring_entry *entry) {
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

// Whether the request may wait long on the disk or the network (see the top of this file).
// Metadata requests stay on the queue thread: their latency is what the transport is for.
static int cfs_may_block(const struct cfs_ring_entry *entry) {
    struct cfs_in_header in;
    memcpy(&in, entry->header->in_out, sizeof(in));
    switch (in.opcode) {
    case CFS_OP_READ: case CFS_OP_WRITE: case CFS_OP_FSYNC: case CFS_OP_FLUSH: case CFS_OP_FSYNCDIR:
    case CFS_OP_FALLOCATE: case CFS_OP_LSEEK: case CFS_OP_COPY_FILE_RANGE: case CFS_OP_SYNCFS:
        return 1;
    case CFS_OP_SETATTR: {
        uint32_t valid;  // fuse_setattr_in starts with its `valid` bits
        memcpy(&valid, entry->header->op_in, sizeof(valid));
        return (valid & CFS_FATTR_SIZE) != 0;
    }
    case CFS_OP_OPEN: case CFS_OP_CREATE: {
        // A truncating open drops the file's cached pages, which takes long for a big file.
        uint32_t flags;  // fuse_open_in and fuse_create_in start with the open's flags
        memcpy(&flags, entry->header->op_in, sizeof(flags));
        return (flags & O_TRUNC) != 0;
    }
    default:
        return 0;
    }
}

// Hands `entry` to a lane thread of `queue`, starting one when none is free. 0, or -1 when
// no thread could serve it (the caller serves it itself).
static int cfs_lane_push(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry) {
    struct cfs_ring_lane *lane = &queue->lane;
    pthread_mutex_lock(&lane->lock);
    if (lane->waiting >= lane->idle && lane->threads < LANE_MOST
        && pthread_create(&lane->ids[lane->threads], NULL, cfs_lane_thread, queue) == 0) {
        lane->threads++;
    }
    if (lane->threads == 0) {
        pthread_mutex_unlock(&lane->lock);
        return -1;
    }
    entry->next = NULL;
    if (lane->tail != NULL) lane->tail->next = entry; else lane->head = entry;
    lane->tail = entry;
    lane->waiting++;
    pthread_mutex_unlock(&lane->lock);
    // Signalled with the lock held, the lane thread woke only to block on it again: two more
    // futex calls and a switch each way per hand-over, on one CPU.
    pthread_cond_signal(&lane->wake);
    return 0;
}

// Serves an entry the kernel just filled: counted here, on the queue thread.
static void cfs_serve(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry) {
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

static void cfs_pin(int cpu) {
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
static void cfs_take_nice(struct cfs_ring_queue *queue) {
    struct cfs_ring *ring = queue->ring;
    int running = ring->queue_nice != 0 ? cfs_set_thread_nice(ring->queue_nice) : cfs_thread_nice();
    if (queue->qid == 0) atomic_store(&ring->running_nice, running);
}

int cfs_ring_serving(void) { return cfs_serving != NULL; }

// A READ the kernel did not pass through, answered by reading the file straight into the
// payload of the entry that carries it. Through libfuse (`fuse_reply_data`), which cannot splice
// into a ring entry, each reply would take a buffer of the read's size (mmapped afresh and
// unmapped again, 128 KiB and up, faulted in page by page), read into it and then be copied
// into the entry.
int cfs_ring_reply_read(void *req, int fd, int64_t offset, size_t size) {
    struct cfs_ring_entry *entry = cfs_serving;
    if (entry == NULL) return 0;
    uint64_t unique = atomic_load(&entry->awaiting);
    if (unique == 0) return 0;
    // Never more than the entry holds (the kernel asks for at most max_read): shortened, the
    // reply would read as the end of the file. libfuse's path answers EIO instead.
    if (size > entry->queue->ring->payload_size) return 0;
    char *payload = entry->buffer + HEADROOM;
    size_t got = 0;
    // As libfuse does: until `size` bytes or the end of the file (a short read is no end).
    while (got < size) {
        ssize_t count = pread(fd, payload + got, size - got, offset + (off_t)got);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0) {
            if (got > 0) break;
            return -errno;
        }
        if (count == 0) break;
        got += (size_t)count;
    }
    uint64_t expected = unique;
    if (!atomic_compare_exchange_strong(&entry->awaiting, &expected, 0)) return 0;
    struct cfs_out_header *out = (struct cfs_out_header *)entry->header->in_out;
    out->error = 0;
    out->unique = unique;
    cfs_set_reply_size(entry, got);
    atomic_fetch_add_explicit(&entry->queue->ring->direct_reads, 1, memory_order_relaxed);
    cfs_answered(entry);
    fuse_reply_none(req);   // frees the request; the reply is in the entry
    return 1;
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

static void *cfs_lane_thread(void *arg) {
    struct cfs_ring_queue *queue = arg;
    struct cfs_ring_lane *lane = &queue->lane;
    char name[16];
    snprintf(name, sizeof(name), "coordfs-lane%d", queue->qid);
    pthread_setname_np(pthread_self(), name);
    cfs_pin(queue->qid);
    pthread_mutex_lock(&lane->lock);
    for (;;) {
        while (lane->head == NULL && !atomic_load(&queue->ring->stopping)) {
            lane->idle++;
            pthread_cond_wait(&lane->wake, &lane->lock);
            lane->idle--;
        }
        struct cfs_ring_entry *entry = lane->head;
        if (entry == NULL) break;
        lane->head = entry->next;
        if (lane->head == NULL) lane->tail = NULL;
        lane->waiting--;
        pthread_mutex_unlock(&lane->lock);
        cfs_process(entry);
        pthread_mutex_lock(&lane->lock);
    }
    pthread_mutex_unlock(&lane->lock);
    return NULL;
}

static void *cfs_ring_thread(void *arg) {
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
