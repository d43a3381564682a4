// FUSE over io_uring: replies, captured from libfuse's writev into their ring entries and
// committed by the entry's queue thread (see ring.c).
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

// The reply's length in its entry: the header's and the kernel's count of payload bytes.
void cfs_set_reply_size(struct cfs_ring_entry *entry, size_t size) {
    ((struct cfs_out_header *)entry->header->in_out)->len = (uint32_t)(sizeof(struct cfs_out_header) + size);
    entry->header->ent.payload_sz = (uint32_t)size;
}

// Copies a reply into `entry` for the kernel to commit.
void cfs_copy_reply(struct cfs_ring_entry *entry, const struct iovec *iov, int count) {
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
void cfs_answered(struct cfs_ring_entry *entry) {
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
    // Answered later (a wait for coordination ended), from any thread. Rare, and a ring has
    // few entries (queues times depth), so the entry is found by scanning for its request id
    // rather than kept in a map that every request would have to update.
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

void cfs_commit_list(struct cfs_ring_queue *queue, struct cfs_ring_entry *list) {
    while (list != NULL) {
        struct cfs_ring_entry *entry = list;
        list = entry->next;
        entry->next = NULL;
        queue->busy--;
        uint64_t unique = ((struct cfs_out_header *)entry->header->in_out)->unique;
        cfs_submit_command(queue, entry, CFS_RING_COMMIT_AND_FETCH, unique);
    }
}

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
