// FUSE over io_uring: the lane threads, which serve the requests that may wait long (see
// ring.c), and the map of nodes whose requests all go to them.
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

// The word of its page that holds `nodeid`'s bit in the lane map.
static size_t cfs_lane_word(uint64_t nodeid) { return (size_t)((nodeid & ((1 << LANE_PAGE_BITS) - 1)) >> 6); }

// Where `nodeid` is in the lane map, which covers 2^32 ids: a stable id (the backing's file
// handle, 2^32 and above) is folded into it. Two ids may share a bit: a request of the other
// then goes to a lane thread too, which costs it a hand-over and nothing else.
static uint64_t cfs_lane_key(uint64_t nodeid) { return nodeid >> 32 ? (uint32_t)(nodeid ^ (nodeid >> 32)) : nodeid; }

// Marks `nodeid` in the lane map, making its pages on first use. 1 when it was not marked.
int cfs_mark_lane_node(struct cfs_ring *ring, uint64_t nodeid) {
    nodeid = cfs_lane_key(nodeid);
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
int cfs_lanes_node(struct cfs_ring *ring, const struct cfs_ring_entry *entry) {
    _Atomic(uint64_t) *_Atomic *pages = atomic_load_explicit(&ring->lane_pages, memory_order_acquire);
    if (pages == NULL) return 0;                              // nothing marked: most mounts
    struct cfs_in_header in;
    memcpy(&in, entry->header->in_out, sizeof(in));
    uint64_t key = cfs_lane_key(in.nodeid);
    _Atomic(uint64_t) *page = atomic_load_explicit(&pages[key >> LANE_PAGE_BITS], memory_order_acquire);
    if (page == NULL) return 0;
    uint64_t word = atomic_load_explicit(&page[cfs_lane_word(key)], memory_order_relaxed);
    return (word >> (key & 63)) & 1;
}

// Whether the request may wait long on the disk or the network (see the top of this file).
// Metadata requests stay on the queue thread: their latency is what the transport is for.
int cfs_may_block(const struct cfs_ring_entry *entry) {
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
int cfs_lane_push(struct cfs_ring_queue *queue, struct cfs_ring_entry *entry) {
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

void *cfs_lane_thread(void *arg) {
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
