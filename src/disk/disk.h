/* disk/disk.h: the client-owned disk store (the LOCAL_DISK tier under the memory pool).
 *
 * Objects live in large append-only bucket files under one directory; each record is a
 * header (magic, version, flags, key length, value length, sequence number, xxhash of
 * key + value, a header checksum) followed by the key and the value, padded so every
 * record starts on a 4 KiB boundary (O_DIRECT-able). An in-memory index maps key ->
 * (bucket, offset, length); it is rebuilt on open by scanning the bucket headers, so a
 * client restarted on the same directory serves its objects again. A torn tail is cut
 * off on open, a record whose header or checksum does not verify is skipped and counted,
 * never returned. Space is reclaimed by compacting buckets whose live ratio fell below a
 * threshold (a background thread) and, under a capacity limit with watermarks, by
 * evicting the least recently used objects. The format, the recovery rules and the I/O
 * design: docs/ssd-tier.md.
 *
 * I/O runs on the store's own threads, never on the caller's: io_uring (liburing) when
 * the build has it and the kernel allows it, else a pread/pwrite thread pool; O_DIRECT
 * when the file system takes it (ext4, xfs), buffered I/O otherwise (e.g. an old tmpfs).
 *
 * Upstream behaviour followed (../shared/reference/upstream-mooncake.md §4.10): the
 * client FileStorage with its default bucket backend, its MOONCAKE_OFFLOAD_* knobs
 * (mc_disk_config_from_env) and its SsdMetric names (mc_disk_metrics).
 *
 * Statuses are upstream codes (mooncake/status.h). Threads: every function may be called
 * from any thread except mc_disk_close (not concurrently with other calls on the same
 * store) and the sync wrappers (never from a completion callback: that would wait on
 * the thread that has to complete it). */
#ifndef MOONCAKE_DISK_DISK_H
#define MOONCAKE_DISK_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define MC_DISK_MAX_KEY_LEN 4096u     /* bytes of one key */
#define MC_DISK_MAX_IOV 1024          /* iovec entries of one put */
#define MC_DISK_ALIGN 4096u           /* records start and end on this boundary */
#define MC_DISK_LAT_BUCKETS 18        /* finite bounds of the latency histograms */

typedef struct mc_disk_store mc_disk_store;

/* Which I/O engine runs the reads and writes. AUTO: io_uring when built with liburing
 * and io_uring_queue_init succeeds, else the thread pool. URING: the same, but the
 * fallback is logged at WARNING. THREADS: the thread pool always. */
typedef enum { MC_DISK_IO_AUTO = 0, MC_DISK_IO_URING, MC_DISK_IO_THREADS } mc_disk_io_kind;
/* O_DIRECT: AUTO uses it when opening a bucket with O_DIRECT succeeds and a probe write
 * works; ON fails the open when it does not; OFF never uses it. */
typedef enum { MC_DISK_DIRECT_AUTO = 0, MC_DISK_DIRECT_ON, MC_DISK_DIRECT_OFF } mc_disk_direct;

typedef struct mc_disk_config {
    const char *dir;              /* directory of the bucket files (created if missing, one
                                   * level); borrowed during mc_disk_open only */
    uint64_t capacity_bytes;      /* hard limit on the bytes of all bucket files; 0 = none
                                   * (the file system's ENOSPC still refuses cleanly) */
    uint64_t max_keys;            /* limit on live objects; 0 = none */
    uint64_t bucket_size_bytes;   /* a bucket is sealed once it reaches this size */
    uint64_t bucket_max_keys;     /* ... or holds this many records; 0 = no key limit */
    uint64_t max_object_bytes;    /* largest value accepted */
    bool enable_eviction;         /* evict LRU objects above the high watermark */
    double high_watermark;        /* (0, 1]: fraction of capacity that starts eviction */
    double low_watermark;         /* (0, high): eviction stops at this fraction */
    double compact_live_ratio;    /* [0, 1): a sealed bucket whose live bytes fall below
                                   * this fraction of its size is compacted; 0 = never */
    mc_disk_io_kind io;
    mc_disk_direct direct;
    unsigned io_threads;          /* thread-pool workers (1..64) */
    unsigned queue_depth;         /* io_uring requests in flight (1..4096) */
    bool verify_on_open;          /* open reads every record's value to check its xxhash
                                   * (default: only the two newest buckets', where a torn
                                   * write can be) */
} mc_disk_config;

/* mc_disk_config_default: capacity 0 (none), max_keys 0, bucket 256 MiB / no key limit,
 * max object 1 GiB, eviction on, watermarks 0.90 / 0.80, compaction below 0.5 live,
 * io AUTO, direct AUTO, 4 threads, queue depth 64, verify_on_open false. dir NULL. */
void mc_disk_config_default(mc_disk_config *cfg);

/* mc_disk_config_from_env: overrides cfg fields from upstream's environment variables
 * (file_storage.cpp FileStorageConfig::FromEnvironment): MOONCAKE_OFFLOAD_FILE_STORAGE_PATH
 * (dir), ..._TOTAL_SIZE_LIMIT_BYTES (capacity_bytes), ..._TOTAL_KEYS_LIMIT (max_keys),
 * ..._BUCKET_SIZE_LIMIT_BYTES, ..._BUCKET_KEYS_LIMIT, ..._ENABLE_DISK_WATERMARK_EVICTION,
 * ..._DISK_EVICTION_HIGH_WATERMARK_RATIO / _LOW_, and ..._USE_URING (true: URING, false:
 * THREADS; unset leaves cfg->io). Also MC_DISK_DIRECT (auto/on/off, ours). An unset or
 * empty variable leaves the field; a bad value logs its name (common/env.h) and returns
 * INVALID_PARAMS with cfg partly updated. cfg->dir then points into the environment. */
int mc_disk_config_from_env(mc_disk_config *cfg);

/* mc_disk_open: opens (creating if needed) the store in cfg->dir, takes an exclusive
 * flock on <dir>/LOCK, scans every bucket and rebuilds the index (docs/ssd-tier.md
 * "Recovery"), starts the I/O threads and the maintenance thread. *out = new store
 * (mc_disk_close frees it). Returns OK; INVALID_PARAMS (bad config); FILE_OPEN_FAIL (the
 * directory or a bucket cannot be opened; O_DIRECT ON not supported); FILE_LOCK_FAIL
 * (another store holds the directory); FILE_READ_FAIL (a scan read failed). */
int mc_disk_open(const mc_disk_config *cfg, mc_disk_store **out);

/* mc_disk_close: stops accepting requests, waits for those in flight (their callbacks
 * run), stops the threads, fdatasyncs and closes the buckets, frees the store. NULL ok.
 * Not from a completion callback. */
void mc_disk_close(mc_disk_store *s);

/* Completion callback: status OK or a status code; size = the value's bytes (get: the
 * bytes copied into dest; put: the bytes stored). Runs on one of the store's threads;
 * keep it short, do not block in it, and never call a sync wrapper or mc_disk_close from
 * it (the async calls are fine). */
typedef void (*mc_disk_cb)(void *ctx, int status, uint64_t size);

/* mc_disk_put_async: stores key (klen bytes, 1..MC_DISK_MAX_KEY_LEN; copied) -> the
 * concatenation of iov[0..iovcnt) (0..MC_DISK_MAX_IOV entries, total <= max_object_bytes;
 * the memory is borrowed until cb runs). A put of an existing key replaces it once the
 * new record is written (the newest put wins, by sequence number). The object is visible
 * to gets once cb reports OK. Returns OK (cb will run exactly once), or, with cb not run:
 * INVALID_PARAMS (bad arguments), UNAVAILABLE_IN_CURRENT_STATUS (closing). cb statuses:
 * OK; NO_AVAILABLE_HANDLE (capacity reached after eviction, or the file system's ENOSPC:
 * nothing else changes); KEYS_ULTRA_LIMIT (max_keys reached and eviction off);
 * FILE_WRITE_FAIL (another write error); FILE_OPEN_FAIL (a new bucket could not be made). */
int mc_disk_put_async(mc_disk_store *s, const void *key, size_t klen,
                      const struct iovec *iov, int iovcnt, mc_disk_cb cb, void *ctx);

/* mc_disk_get_async: reads key into dest (cap bytes, borrowed until cb runs). The record
 * is verified (header, key, xxhash of key + value) before cb reports OK with the value's
 * size. Returns OK (cb will run), or, with cb not run: INVALID_PARAMS, OBJECT_NOT_FOUND
 * (not in the index), BUFFER_OVERFLOW (cap < the value's size),
 * UNAVAILABLE_IN_CURRENT_STATUS. cb statuses: OK; CHECKSUM_MISMATCH (the record does not
 * verify: it is counted, dropped from the index and marked dead; later gets miss);
 * FILE_READ_FAIL (an I/O error). Counts as an access for the LRU. */
int mc_disk_get_async(mc_disk_store *s, const void *key, size_t klen, void *dest,
                      uint64_t cap, mc_disk_cb cb, void *ctx);

/* Sync wrappers: submit and wait for the callback (any thread but the store's own).
 * mc_disk_get sets *size (may be NULL) to the value's bytes. Statuses as above. */
int mc_disk_put(mc_disk_store *s, const void *key, size_t klen, const void *value,
                uint64_t vlen);
int mc_disk_putv(mc_disk_store *s, const void *key, size_t klen, const struct iovec *iov,
                 int iovcnt);
int mc_disk_get(mc_disk_store *s, const void *key, size_t klen, void *dest, uint64_t cap,
                uint64_t *size);

/* mc_disk_lookup: OK with *size (may be NULL) = the value's bytes, or OBJECT_NOT_FOUND,
 * INVALID_PARAMS. Index only (no I/O, no LRU touch). */
int mc_disk_lookup(mc_disk_store *s, const void *key, size_t klen, uint64_t *size);

/* mc_disk_delete: drops key from the index at once (later gets miss) and marks its
 * record dead on a store thread (a delete lost to a crash before that mark lands brings
 * the object back on the next open). OK, OBJECT_NOT_FOUND, INVALID_PARAMS. */
int mc_disk_delete(mc_disk_store *s, const void *key, size_t klen);

/* mc_disk_foreach: calls fn(key, klen, size, ctx) for every object in the index, under
 * the store's lock (fn must not call into the store); fn returns false to stop. For the
 * owner to re-announce its objects after a restart (upstream ScanMeta). Returns the
 * number of calls. */
size_t mc_disk_foreach(mc_disk_store *s,
                       bool (*fn)(const void *key, size_t klen, uint64_t size, void *ctx),
                       void *ctx);

/* mc_disk_maintain: runs one maintenance pass (watermark eviction, removal of empty
 * buckets, compaction of every bucket below the live ratio) on the maintenance thread
 * and waits for it. Returns the number of buckets compacted or removed. For tests and
 * tools; the thread also runs on its own whenever a delete, an eviction or a crossed
 * watermark asks for it. Not from a completion callback. */
int mc_disk_maintain(mc_disk_store *s);

/* Latency histogram bounds in microseconds, upstream's kSsdLatencyBucket
 * (client_metric.h): bucket i counts samples <= mc_disk_latency_bounds_us[i], the last
 * bucket (index MC_DISK_LAT_BUCKETS) the rest. */
extern const uint64_t mc_disk_latency_bounds_us[MC_DISK_LAT_BUCKETS];

/* A snapshot of the store's counters. Upstream names (client_metric.h SsdMetric) in
 * brackets; mc_disk_metrics_prometheus writes them. */
typedef struct mc_disk_metrics {
    uint64_t capacity_bytes;     /* the configured limit, 0 = none */
    uint64_t used_bytes;         /* bytes of the bucket files, dead records included */
    uint64_t live_bytes;         /* on-disk bytes of live records */
    uint64_t objects;            /* live objects */
    uint64_t buckets;
    uint64_t write_ops;          /* puts that succeeded [mooncake_ssd_write_ops_total] */
    uint64_t write_bytes;        /* their value bytes [mooncake_ssd_write_bytes_total] */
    uint64_t read_ops;           /* gets that succeeded [mooncake_ssd_read_ops_total] */
    uint64_t read_bytes;         /* their value bytes [mooncake_ssd_read_bytes_total] */
    uint64_t write_failures;     /* puts refused or failed (all reasons) */
    uint64_t read_failures;      /* gets that failed after submission */
    uint64_t full_refusals;      /* puts refused for space: capacity or ENOSPC */
    uint64_t checksum_failures;  /* records that failed verification on read or open */
    uint64_t corrupt_skipped;    /* unreadable headers skipped while scanning on open */
    uint64_t torn_truncations;   /* bucket tails cut off on open */
    uint64_t compactions;        /* buckets compacted */
    uint64_t compacted_bytes;    /* live bytes moved by compaction */
    uint64_t reclaimed_bytes;    /* bucket bytes removed (compaction or empty buckets) */
    uint64_t evictions;          /* objects evicted for space */
    uint64_t evicted_bytes;
    uint64_t read_lat_count, read_lat_sum_us;             /* [mooncake_ssd_read_latency_us] */
    uint64_t read_lat_buckets[MC_DISK_LAT_BUCKETS + 1];
    uint64_t write_lat_count, write_lat_sum_us;           /* [mooncake_ssd_write_latency_us] */
    uint64_t write_lat_buckets[MC_DISK_LAT_BUCKETS + 1];
    bool direct_io;              /* records are read and written with O_DIRECT */
    const char *io_backend;      /* "io_uring" or "threads" (static string) */
} mc_disk_metrics;

/* mc_disk_get_metrics: fills *m (a consistent-enough snapshot: counters are read one by
 * one). Any thread. */
void mc_disk_get_metrics(mc_disk_store *s, mc_disk_metrics *m);

/* mc_disk_metrics_prometheus: writes m in the Prometheus text format (upstream names
 * where they exist, mooncake_ssd_* otherwise) into buf (cap bytes, NUL-terminated,
 * truncated if short). Returns the length the full text needs (like snprintf). */
size_t mc_disk_metrics_prometheus(const mc_disk_metrics *m, char *buf, size_t cap);

#endif
