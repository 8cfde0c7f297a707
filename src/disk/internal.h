/* disk/internal.h: the disk store's internals shared by its files (record.c, io.c,
 * store.c, maint.c) and its unit tests. Nobody else includes it. */
#ifndef MOONCAKE_DISK_INTERNAL_H
#define MOONCAKE_DISK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "disk/disk.h"

/* ------------------------------------------------------------------ record format
 * Little-endian, 48 bytes, at a 4 KiB-aligned offset of a bucket file:
 *   0  u32 magic      MC__REC_LIVE, or MC__REC_DEAD once deleted / superseded
 *   4  u16 version    1
 *   6  u16 flags      0 (reserved)
 *   8  u32 key_len
 *  12  u32 hdr_sum    low 32 bits of XXH3-64 of bytes 4..47 (hdr_sum zeroed) + key
 *  16  u64 value_len
 *  24  u64 seq        store-wide sequence number: the newest record of a key wins
 *  32  u64 checksum   XXH3-64 of key || value
 *  40  u64 reserved   0
 * then key_len bytes of key, value_len bytes of value, zero padding to 4 KiB. The magic
 * is outside hdr_sum so a 4-byte overwrite can kill a record without rewriting it. */
#define MC__REC_LIVE 0x4b44434du /* "MCDK" */
#define MC__REC_DEAD 0x44414544u /* "DEAD" */
#define MC__REC_VERSION 1
#define MC__REC_HDR 48u

typedef struct mc__rec_hdr {
    uint32_t magic;
    uint16_t version, flags;
    uint32_t key_len, hdr_sum;
    uint64_t value_len, seq, checksum;
} mc__rec_hdr;

static inline uint64_t mc__align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
/* mc__rec_foot: on-disk bytes of a record (header + key + value, padded). */
static inline uint64_t mc__rec_foot(uint64_t klen, uint64_t vlen)
{
    return mc__align_up(MC__REC_HDR + klen + vlen, MC_DISK_ALIGN);
}
/* mc__rec_encode: writes h into out[MC__REC_HDR] computing hdr_sum over key. */
void mc__rec_encode(mc__rec_hdr *h, const void *key, void *out);
/* mc__rec_decode: parses in[MC__REC_HDR]; 0 when the magic is LIVE or DEAD, the version
 * known, the lengths within limits (max_key, max_value); -EBADMSG otherwise. hdr_sum is
 * checked by mc__rec_hdr_ok once the key is at hand. */
int mc__rec_decode(const void *in, mc__rec_hdr *h, uint64_t max_value);
bool mc__rec_hdr_ok(const mc__rec_hdr *h, const void *key);
/* mc__rec_checksum: XXH3-64 of key || value. */
uint64_t mc__rec_checksum(const void *key, size_t klen, const void *value, uint64_t vlen);

/* ------------------------------------------------------------------ I/O engine
 * An op is one read or write of a contiguous buffer at an offset. start() runs on an
 * engine worker thread before the I/O: it prepares fd/buf/len/off and returns true, or
 * completes the request itself and returns false (no I/O, done() not called). done()
 * runs on a worker thread with the bytes transferred (== len unless the file ended) or
 * -errno. With io_uring the I/O itself is issued and reaped by the ring thread, which
 * runs no start()/done(): the CPU work (copies, checksums) never delays the queue. */
typedef struct mc__disk_op mc__disk_op;
struct mc__disk_op {
    mc_list link;                         /* in the engine's pending list */
    bool (*start)(mc__disk_op *op);
    void (*done)(mc__disk_op *op, int64_t res);
    int fd;
    bool write;
    void *buf;
    uint64_t len, off;
    uint64_t xfer;                        /* engine-private: bytes done so far */
    int64_t res;                          /* engine-private: the result for done() */
    bool started;                         /* set by mc__disk_io_submit_started */
    bool io_done;                         /* engine-private: the I/O has finished */
};

typedef struct mc__disk_io mc__disk_io;
/* mc__disk_io_create: nthreads workers; kind AUTO/URING add a ring thread with
 * queue_depth entries when io_uring_queue_init succeeds (else the workers do the I/O
 * with pread/pwrite, like THREADS). *out = new engine. 0 or -errno. */
int mc__disk_io_create(mc_disk_io_kind kind, unsigned nthreads, unsigned queue_depth,
                       mc__disk_io **out);
/* mc__disk_io_submit: queues op (owned by the caller until done or start completes it).
 * Any thread, I/O threads included. */
void mc__disk_io_submit(mc__disk_io *io, mc__disk_op *op);
/* mc__disk_io_submit_started: queues op whose start() the caller already ran (and got
 * true): it goes straight to the ring (or to a worker for the I/O), one thread hand-off
 * fewer. For a start() that is cheap and does no I/O (a get's buffer). */
void mc__disk_io_submit_started(mc__disk_io *io, mc__disk_op *op);
/* mc__disk_io_destroy: waits until every submitted op has completed, then stops the
 * threads. Not from an engine thread. */
void mc__disk_io_destroy(mc__disk_io *io);
const char *mc__disk_io_name(const mc__disk_io *io);
/* mc__disk_io_uring_built: whether this build has liburing. */
bool mc__disk_io_uring_built(void);

/* ------------------------------------------------------------------ the store */
typedef struct mc__disk_bucket {
    uint64_t id;
    int fd;             /* the data fd: O_DIRECT when s->direct */
    int bfd;            /* buffered fd (dead marks, scans); == fd when not direct */
    uint64_t size;      /* append offset = reserved bytes (s->lock) */
    uint64_t alloc;     /* bytes preallocated with fallocate (the file's length while
                         * > size: appends below it do not extend the file) (s->lock) */
    uint64_t live_bytes, live_count;  /* live records' footprint and number (s->lock) */
    uint64_t nrecords;  /* records ever appended here (s->lock) */
    unsigned writes;    /* appends in flight (s->lock) */
    unsigned refs;      /* s->buckets' one + one per I/O in flight (s->lock) */
    bool sealed;        /* no more appends (s->lock) */
    bool removed;       /* unlinked, off s->buckets (s->lock) */
    bool compacting;    /* being compacted: only the compactor removes it (s->lock) */
    bool compact_tried; /* compacted in the current pass (maintenance thread, s->lock) */
    mc_list link;       /* s->buckets, oldest first (s->lock) */
    mc_list entries;    /* live entries stored here (s->lock) */
} mc__disk_bucket;

typedef struct mc__disk_entry {
    struct mc__disk_entry *hnext;  /* hash chain (s->lock) */
    uint64_t hash;
    mc_list lru;                   /* s->lru, least recently used first (s->lock) */
    mc_list blink;                 /* bucket->entries (s->lock) */
    mc__disk_bucket *bucket;       /* where the record is (s->lock) */
    uint64_t off, foot, vlen, seq;
    uint32_t klen;
    char key[];
} mc__disk_entry;

typedef struct mc__disk_stats {
    _Atomic uint64_t write_ops, write_bytes, read_ops, read_bytes;
    _Atomic uint64_t write_failures, read_failures, full_refusals;
    _Atomic uint64_t checksum_failures, corrupt_skipped, torn_truncations;
    _Atomic uint64_t compactions, compacted_bytes, reclaimed_bytes;
    _Atomic uint64_t evictions, evicted_bytes;
    _Atomic uint64_t rlat_count, rlat_sum, rlat[MC_DISK_LAT_BUCKETS + 1];
    _Atomic uint64_t wlat_count, wlat_sum, wlat[MC_DISK_LAT_BUCKETS + 1];
} mc__disk_stats;

struct mc_disk_store {
    mc_disk_config cfg;            /* copy; cfg.dir points at dir */
    char *dir;
    int dirfd, lockfd;
    bool direct;                   /* buckets are opened O_DIRECT */
    bool no_fallocate;             /* the file system has no fallocate (s->lock) */
    mc__disk_io *io;

    pthread_mutex_t lock;          /* guards everything below marked (s->lock) */
    pthread_cond_t idle;           /* inflight reached 0 (s->lock) */
    mc__disk_entry **table;        /* hash table, nbuckets_tab slots (s->lock) */
    size_t tab_size, nentries;
    mc_list lru;                   /* (s->lock) */
    mc_list buckets;               /* oldest first (s->lock) */
    mc__disk_bucket *active;       /* where appends go, NULL until the first (s->lock) */
    uint64_t next_bucket_id, seq;  /* (s->lock) */
    uint64_t used_bytes, live_bytes, nbuckets;  /* (s->lock) */
    uint64_t pending_puts;         /* puts reserved, not yet indexed (s->lock) */
    unsigned inflight;             /* requests accepted, callback not yet run (s->lock) */
    bool closing;                  /* (s->lock) */

    /* the maintenance thread */
    pthread_t maint;
    pthread_cond_t maint_cv;       /* wakes it (s->lock) */
    pthread_cond_t maint_done_cv;  /* a requested pass finished (s->lock) */
    bool maint_stop, maint_kick;   /* (s->lock) */
    uint64_t maint_req, maint_done;  /* pass counters for mc_disk_maintain (s->lock) */
    int maint_result;              /* of the last requested pass (s->lock) */

    /* aligned staging buffers: a few freed ones kept for reuse (store.c) */
    pthread_mutex_t buf_lock;
    void *bufs[32];                /* (buf_lock) */
    uint64_t buf_caps[32];         /* their sizes (buf_lock) */
    int buf_n;                     /* (buf_lock) */
    uint64_t buf_bytes;            /* (buf_lock) */

    mc__disk_stats st;
};

/* store.c, used by maint.c (s->lock held where the name says _locked) */
uint64_t mc__disk_key_hash(const void *key, size_t klen);
mc__disk_entry *mc__disk_find_locked(mc_disk_store *s, const void *key, size_t klen,
                                     uint64_t hash);
void mc__disk_unindex_locked(mc_disk_store *s, mc__disk_entry *e);
void mc__disk_bucket_unref_locked(mc_disk_store *s, mc__disk_bucket *b);
/* mc__disk_reserve_locked: room for foot bytes in the active bucket (sealing it and
 * opening a new one as needed; removing empty buckets when over capacity). Returns the
 * bucket (one ref taken, writes++) and *off, or NULL with *status NO_AVAILABLE_HANDLE
 * (over capacity, or ENOSPC making a bucket) or FILE_OPEN_FAIL. */
mc__disk_bucket *mc__disk_reserve_locked(mc_disk_store *s, uint64_t foot, uint64_t *off,
                                         int *status);
/* mc__disk_write_done_locked: a reserved append finished (writes--, unref). */
void mc__disk_write_done_locked(mc_disk_store *s, mc__disk_bucket *b);
/* mc__disk_append_failed_locked: a reserved append [off, off + foot) of b failed; gives
 * the range back when it is the tail. Returns true when the caller must mark it dead. */
bool mc__disk_append_failed_locked(mc_disk_store *s, mc__disk_bucket *b, uint64_t off,
                                   uint64_t foot);
/* mc__disk_mark_dead: overwrites the record's magic with MC__REC_DEAD (no lock held;
 * the caller holds a ref on b). */
void mc__disk_mark_dead(mc_disk_store *s, mc__disk_bucket *b, uint64_t off);
/* mc__disk_remove_bucket_locked: unlinks an empty, sealed, idle bucket. */
void mc__disk_remove_bucket_locked(mc_disk_store *s, mc__disk_bucket *b);
void *mc__disk_buf_get(mc_disk_store *s, uint64_t size);
void mc__disk_buf_put(mc_disk_store *s, void *buf, uint64_t size);
void mc__disk_lat_observe(_Atomic uint64_t *hist, _Atomic uint64_t *count,
                          _Atomic uint64_t *sum, uint64_t us);
/* mc__disk_evict_locked: evicts LRU entries until live + need <= target; the victims'
 * dead marks are done after unlocking by mc__disk_flush_victims. */
typedef struct mc__disk_victim {
    mc__disk_bucket *b;
    uint64_t off;
} mc__disk_victim;
size_t mc__disk_evict_locked(mc_disk_store *s, uint64_t target_live, mc__disk_victim **out);
void mc__disk_flush_victims(mc_disk_store *s, mc__disk_victim *v, size_t n);
/* mc__disk_reclaim_locked: removes empty idle buckets and gives back the preallocated
 * tails of sealed idle ones; returns how many buckets it removed. */
int mc__disk_reclaim_locked(mc_disk_store *s);

/* maint.c */
int mc__disk_maint_start(mc_disk_store *s);
void mc__disk_maint_stop(mc_disk_store *s);
void mc__disk_maint_kick_locked(mc_disk_store *s);

#endif
