// What ring.c, ring_lanes.c, ring_replies.c and serving_threads.c share: the rings, their
// queues, entries and lanes, and the functions one file calls in another. Not for Swift.
#ifndef CFS_RING_INTERNAL_H
#define CFS_RING_INTERNAL_H
#include "fuse_abi.h"
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum {
    HEADROOM = 256,             // room for fuse_in_header (40) and the fixed arguments (<= 128)
    FIRST_ENTRIES = 8,          // per queue at the start
    MOST_ENTRIES = 1024,        // per queue: requests waiting for coordination at once
    SPARE_ENTRIES = 4,          // free entries a queue keeps while it can grow
    SQ_SIZE = 256,
    CQ_SIZE = 4096,             // > MOST_ENTRIES + the eventfd's
    LANE_MOST = 8,              // per queue: requests that may block, served at once
    LANE_PAGE_BITS = 16,        // node ids per page of the lane map: 2^16 (8 KiB of bits)
    LANE_PAGES = 1 << 16,       // pages: 2^32 ids, larger ones folded in (`cfs_lane_key`)
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

extern pthread_rwlock_t cfs_rings_lock;
extern struct cfs_ring *cfs_rings;
extern _Atomic int cfs_ring_count;
extern _Thread_local struct cfs_ring_entry *cfs_serving;
extern _Thread_local struct cfs_ring_entry *cfs_answered_here;
extern _Thread_local struct cfs_ring_queue *cfs_own_queue;

int cfs_add_entry(struct cfs_ring_queue *queue);
int cfs_submit_command(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry, uint32_t command, uint64_t commit_id);
int cfs_lane_push(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry);
int cfs_lanes_node(struct cfs_ring *ring, const struct cfs_ring_entry *entry);
int cfs_mark_lane_node(struct cfs_ring *ring, uint64_t nodeid);
int cfs_may_block(const struct cfs_ring_entry *entry);
struct cfs_ring *cfs_ring_of(int device);
struct io_uring_sqe *cfs_sqe(struct cfs_ring_queue *queue);
void *cfs_lane_thread(void *arg);
void *cfs_ring_thread(void *arg);
void cfs_answered(struct cfs_ring_entry *entry);
void cfs_arm_eventfd(struct cfs_ring_queue *queue);
void cfs_commit_list(struct cfs_ring_queue *queue, struct cfs_ring_entry *list);
void cfs_copy_reply(struct cfs_ring_entry *entry, const struct iovec *iov, int count);
void cfs_free_queue(struct cfs_ring_queue *queue);
void cfs_pin(int cpu);
void cfs_process(struct cfs_ring_entry *entry);
void cfs_serve(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry);
void cfs_set_reply_size(struct cfs_ring_entry *entry, size_t size);
void cfs_take_nice(struct cfs_ring_queue *queue);

#endif
