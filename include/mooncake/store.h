/* store.h: the store client's C API (src/client), what `mooncake.store` wraps.
 *
 * A store client is one process's handle on the distributed KV cache. It both issues
 * requests and contributes memory: setup allocates a *global segment* (memfd-backed
 * shared memory, registered with the transfer engine and mounted on the master), which
 * other clients' replicas are placed in. Bytes move client to client through the
 * transfer engine (transfer_engine.h); the master (mooncake_master) only places and
 * indexes them.
 *
 * Upstream: `mooncake-store/src/real_client.cpp` (RealClient: setup, put/get, batch
 * forms), `client_service.cpp` (Put/Get protocol, heartbeat), bound to Python by
 * `mooncake-integration/store/store_py.cpp`. Semantics:
 * ../shared/reference/upstream-mooncake.md §1 and §4; the contract ../shared/API.md §1,
 * §2 and §5 (which wins where it is stricter than upstream).
 *
 * Protocols (what every call does on the wire):
 *   put:  put_start(key, size, config) on the master -> the bytes are written to every
 *         replica it returns (own segment: a copy with streaming stores; same host: the
 *         engine's shared-memory path; else TCP), all replicas of all keys of a call in one
 *         engine batch (overlapped) -> put_end. Any failure after put_start -> put_revoke,
 *         so nothing half-written is ever published.
 *   get:  get_replica_list(key) (this grants a read lease of lease_ttl_ms, measured from
 *         just before the RPC was sent) -> the best COMPLETE replica (own segment:
 *         memcpy from own memory; then a replica on this host; then a remote one) ->
 *         the bytes go straight into the caller's memory (the engine needs no
 *         registration for the local side of a transfer) -> if the lease ran out before
 *         the read finished, the bytes may have been overwritten: the call fails with
 *         MC_LEASE_EXPIRED (upstream client_service.cpp Get).
 *   Batch forms issue one batch RPC per step (batch_put_start, batch_put_end,
 *   batch_get_replica_list, ...) and one engine batch for all transfers.
 *
 * Semantics (API.md §5; decided where we are stricter than upstream):
 *   - Keys are byte strings (key, key_len), any bytes (UTF-8, `/ : @ % space`, even NUL),
 *     1..MC_STORE_KEY_MAX bytes; an empty or longer key gets MC_INVALID_PARAMS and
 *     nothing is stored. Key pointers are borrowed for the call only.
 *   - A zero-length value is a real object: put returns 0, is_exist 1, get_into 0,
 *     get_size 0 (upstream stores nothing for put_from(size=0)).
 *   - A second put of an existing key returns MC_OK and keeps the old value (upstream:
 *     OBJECT_ALREADY_EXISTS from put_start is swallowed). When another writer's put of
 *     the key is in flight, a put returns MC_OK only once the key is readable (read your
 *     writes, docs/consistency.md): it waits for the other put's end (the winner's value
 *     stays), or writes its own value when that put goes away; after the transfer
 *     timeout (MC_TRANSFER_TIMEOUT) it returns MC_REPLICA_IS_NOT_READY, nothing written.
 *     Exactly one value wins and readers never see a mix.
 *   - Duplicate keys inside one batch: every position gets a correct, filled result
 *     (puts: the first position writes, the later ones get its status; gets: each
 *     position is read into its own buffer).
 *   - A writer that dies between put_start and put_end blocks the key until its client
 *     expires (the master's --client_ttl; at most --put_start_discard_timeout_sec).
 *   - Caller memory (put_from / get_into / batch_* pointers) need not be registered:
 *     registered or not, the bytes go straight between it and the peer (TCP or the
 *     same-host copy). register_buffer is accepted for compatibility; it records the
 *     range in this client only (peers never address a client's own buffers: objects
 *     live in global segments), so it is not published. One check: a range (value, buffer or iov
 *     entry, with its declared length or capacity) that starts inside a buffer
 *     registered with mc_store_register_buffer must end inside a registered buffer that
 *     holds its start; otherwise that key gets MC_INVALID_PARAMS before any RPC or
 *     transfer (logged), in every put/upsert/get_into form. After
 *     mc_store_unregister_buffer the memory is plain caller memory again.
 *
 * Return values: upstream status codes (status.h): MC_OK (0) or a negative MC_*; byte
 * counts are int64_t >= 0; existence is 1/0/negative. Every call made before setup
 * succeeded, or after close, returns MC_INVALID_PARAMS (upstream "not initialised").
 * Batch calls fill one result per key (same order) and return MC_OK, or a negative code
 * when the whole call was refused (bad arrays, not set up): every result is then set
 * to that code too.
 *
 * Threads: every function is thread-safe and may run concurrently from any number of
 * threads on one store, except mc_store_destroy (nothing may be in flight). close waits
 * for calls in flight, and calls that start after close return MC_INVALID_PARAMS. No
 * function calls back into user code except the allocator callback of the *_with
 * calls, which runs on the calling thread.
 *
 * Environment (read at setup):
 *   MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT  port range for a local_hostname
 *       without a port (default 12300..14300, as upstream)
 *   MC_STORE_CLIENT_SETUP_RETRIES  tries to find a free port (default 20, 100 ms apart)
 *   MC_STORE_HEARTBEAT_MS  ping interval to the master (default 1000, 10..60000)
 *   MC_RPC_TIMEOUT_MS      per master RPC (master_client; default 30000)
 *   plus the transfer engine's (transfer_engine.h: MC_FORCE_TCP, MC_TRANSFER_TIMEOUT, ...)
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"
#include "mooncake/transfer_engine.h"

/* Limits (checked on every input). */
#define MC_STORE_KEY_MAX 4096u                  /* bytes per key (API.md §5)             */
#define MC_STORE_MAX_REPLICAS 8u                /* replicas per object (master's limit)   */
#define MC_STORE_MAX_BATCH (1u << 20)           /* keys per batch call                    */
#define MC_STORE_MAX_PARTS 65536u               /* buffers per object (put_parts, multi)  */
#define MC_STORE_MAX_PREFERRED 64u              /* preferred segments per config          */
#define MC_STORE_MAX_USER_BUFFERS (1u << 20)    /* register_buffer ranges held at once    */
#define MC_STORE_MIN_SEGMENT_SIZE 1024u         /* bytes; a non-zero segment is >= this   */
#define MC_STORE_MAX_SEGMENT_SIZE (1ull << 50)  /* bytes per global segment               */
#define MC_STORE_MIN_LOCAL_BUFFER 1024u         /* bytes; a non-zero local buffer >= this */
#define MC_STORE_MAX_LOCAL_BUFFER (1ull << 40)  /* bytes (1 TiB, as upstream)             */
#define MC_STORE_NAME_MAX 256u                  /* bytes of a segment name, with the NUL  */
#define MC_STORE_PROTOCOL_MAX 16u               /* bytes of a protocol name, with the NUL */
#define MC_STORE_DEFAULT_MIN_PORT 12300
#define MC_STORE_DEFAULT_MAX_PORT 14300

typedef struct mc_store mc_store; /* opaque client */

/* A key: key_len bytes at data (not NUL-terminated; may contain NUL). Borrowed. */
typedef struct mc_store_key {
    const void *data;
    size_t len;
} mc_store_key;

/* One piece of caller memory: len bytes at base. For writes the memory is only read;
 * for reads it is written. Borrowed for the call. */
typedef struct mc_store_iov {
    void *base;
    uint64_t len;
} mc_store_iov;

/* ---------------------------------------------------------------------------------- */
/* Setup and teardown                                                                  */
/* ---------------------------------------------------------------------------------- */

/* Setup parameters: upstream's `setup(local_hostname, metadata_server,
 * global_segment_size, local_buffer_size, protocol, rdma_devices, master_server_addr,
 * engine=None, enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
 * enable_client_http_server=False, client_http_port=9300)` (store_py.cpp, real_client.cpp
 * setup_internal), plus a few of ours. Strings are borrowed for the setup call (copied).
 * Fill with mc_store_config_init, then set what you need. */
typedef struct mc_store_config {
    const char *local_hostname;   /* required, non-empty: "host" or "host:port". Without a
                                     port a free one in MC_STORE_CLIENT_MIN_PORT..MAX_PORT
                                     is picked (kept bound while set up, so two clients of
                                     one host never share a name). With P2PHANDSHAKE the
                                     port is the engine's handshake port. */
    const char *metadata_server;  /* required: "P2PHANDSHAKE", "http://h:p/metadata",
                                     "etcd://h:p", "redis://h:p" (metadata.h) */
    uint64_t global_segment_size; /* bytes contributed to the pool; 0 = none (a pure
                                     client); else MIN_SEGMENT_SIZE..MAX_SEGMENT_SIZE.
                                     Default 16 MiB (upstream dict setup default). */
    uint64_t local_buffer_size;   /* bytes of the local buffer (get_buffer handles and
                                     mc_store_buffer_alloc); 0 or MIN_LOCAL_BUFFER..
                                     MAX_LOCAL_BUFFER. Default 16 MiB. */
    const char *protocol;         /* "tcp" (NULL/"" = tcp); "rdma": as the engine (falls
                                     back to TCP with MC_FORCE_TCP, else NOT_SUPPORTED) */
    const char *rdma_devices;     /* NIC filter passed to the engine; NULL/"" = all */
    const char *master_server_addr; /* "host:port" (NULL/"" = "127.0.0.1:50051"). An
                                     "etcd://..." HA address gets MC_NOT_SUPPORTED. */
    mc_te *engine;                /* an initialized engine to share (upstream
                                     `engine=TransferEngine.get_engine()`), or NULL to
                                     create one. Borrowed: it must outlive close; the
                                     store never destroys it, and local_hostname is then
                                     used only for validation (the engine's segment name
                                     is this client's name). */
    bool enable_ssd_offload;      /* open a disk tier in ssd_offload_path (or
                                     MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, which also opens
                                     one on its own): objects evicted from our segment go
                                     to it when the master runs with --enable_offload
                                     (docs/ssd-tier.md); needs global_segment_size > 0 */
    const char *ssd_offload_path; /* the disk tier's directory; NULL = "" */
    const char *tenant_id;        /* NULL/"" = "default"; at most 255 bytes; recorded
                                     (the master has no tenants yet) */
    bool enable_client_http_server; /* serve /health, /metrics, /metrics/summary over
                                       HTTP (upstream's client HTTP server; see
                                       mc_store_client_http_port) */
    int client_http_port;         /* its port, 0..65535 (upstream default 9300; 0: a free
                                     one); a port in use fails setup */
    /* Ours: */
    uint32_t heartbeat_interval_ms; /* 0 = MC_STORE_HEARTBEAT_MS or 1000; 10..60000 */
    uint32_t rpc_timeout_ms;      /* per master RPC; 0 = the master client's default */
    /* The cluster secret (issue 11, docs/security.md), first of: auth_token (the secret
       itself, NUL-terminated, 16..1024 bytes, one trailing newline stripped; copied),
       auth_token_file (a token file: mode 0600, owned by this user), the file that
       MC_AUTH_TOKEN_FILE names; none: no secret (open cluster). The store holds one
       copy, used for the master RPC handshake (and, once the engine takes it, for the
       engine's ports and the metadata HTTP backend). A token or file that fails its
       checks fails setup with MC_INVALID_PARAMS, the reason logged. */
    const char *auth_token;
    const char *auth_token_file;
    /* Shared-FS DISK replicas (docs/ssd-tier.md; LMCache's storage_root_dir): NULL/"" =
       follow the master (with --root_fs_dir, "<root_fs_dir>/<cluster_id>" must be
       writable here, else setup fails). Set: the local path of the master's
       --root_fs_dir; setup fails unless the master runs with one and it names the same
       directory here (same device and inode): the master's path wins, it is the one in
       every replica descriptor. */
    const char *storage_root_dir;
} mc_store_config;

/* mc_store_config_init: NULL strings, sizes 16 MiB / 16 MiB, protocol "tcp",
 * master "127.0.0.1:50051", no engine, tenant "default", client_http_port 9300. */
MC_API void mc_store_config_init(mc_store_config *cfg);

/* mc_store_create: a new client, not set up (upstream MooncakeDistributedStore()).
 * Every data call returns MC_INVALID_PARAMS until setup succeeds. *out receives it;
 * free with mc_store_destroy. Returns MC_OK (aborts on out-of-memory, like every small
 * internal allocation). */
MC_API int mc_store_create(mc_store **out);

/* mc_store_setup: connects and contributes memory (upstream RealClient::setup_real).
 * In order: validates every field (MC_INVALID_PARAMS with the reason logged: missing
 * local_hostname or metadata_server, bad port, sizes out of range, malformed master
 * address or connection string, tenant too long, already set up); creates and
 * initializes the engine unless one is given (port search: up to
 * MC_STORE_CLIENT_SETUP_RETRIES tries, else MC_INTERNAL_ERROR); connects to the master
 * (MC_RPC_FAIL / MC_RPC_TIMEOUT when unreachable); allocates the global segment with
 * mc_te_alloc_shared and mounts it (MC_INVALID_PARAMS, logged as a local allocation
 * failure, when this process cannot map that much: upstream real_client.cpp
 * setup_internal does the same); maps and registers the local buffer
 * (MC_NO_AVAILABLE_HANDLE when it cannot be mapped); starts the heartbeat thread (ping
 * every heartbeat_interval_ms; on NEED_REMOUNT it remounts the segment and republishes
 * all of the engine's metadata, rpc_meta and descriptor; health_check reports failed
 * pings).
 * Restarting under the same name (local_hostname "host:port" given again after a crash):
 * the metadata server may still hold the previous process's rpc_meta, which it keeps
 * write-once. The engine takes the name over when it can prove the entries are its own
 * and stale: the stale descriptor has this machine's host id (machine id + boot id) and
 * the previous owner's handshake port, data port and same-host socket all refuse
 * connections; the takeover is logged as a warning. A live owner under that name (or one
 * that cannot be proven dead: another host, a SIGSTOPped process whose listeners still
 * accept) keeps it, and setup returns MC_OBJECT_ALREADY_EXISTS with the reason logged.
 * Upstream gets -705 in both cases unless the master runs with
 * --enable_metadata_cleanup_on_timeout. (The master may still list the old process's
 * segment under that name until its client_ttl ends; its objects are unreadable.)
 * Failures name the component, the address and what to check: an unreachable metadata
 * server (MC_RPC_FAIL / MC_RPC_TIMEOUT from the engine) names the URL and the master
 * address, e.g. a master not running or run without --enable_http_metadata_server; an
 * http:// URL that is not a metadata endpoint (no /metadata path) gives
 * MC_INVALID_PARAMS naming the URL.
 * On any error everything done so far is undone and the store stays not set up (setup
 * may be tried again). A store that was closed may be set up again.
 * Returns MC_OK or the codes above (engine codes pass through: MC_NOT_SUPPORTED for a
 * protocol it lacks, e.g. "rdma" without MC_FORCE_TCP, logged with what to pass instead;
 * metadata errors). */
MC_API int mc_store_setup(mc_store *s, const mc_store_config *cfg);

/* mc_store_close: waits for calls in flight, stops the heartbeat, unmounts the segment
 * (the master drops replicas there), unregisters and frees the segment, unregisters the
 * local buffer (its memory lives on while mc_store_buffer handles reference it), and
 * destroys the engine unless it was given to setup (upstream tearDownAll).
 * Idempotent: closing a store that is not set up returns MC_OK. Safe from a destructor
 * (never blocks on the master longer than the RPC timeout). Returns MC_OK, or the
 * unmount's code when the master refused (everything local is released anyway). */
MC_API int mc_store_close(mc_store *s);

/* mc_store_destroy: close, then free. NULL is a no-op. No call may be in flight. */
MC_API void mc_store_destroy(mc_store *s);

/* mc_store_is_setup: true between a successful setup and close. */
MC_API bool mc_store_is_setup(mc_store *s);

/* mc_store_get_hostname: this client's segment name, "host:port" (upstream
 * get_hostname; usable as a preferred segment). buf receives it NUL-terminated.
 * Returns the name's length (bytes, without the NUL); MC_BUFFER_OVERFLOW when buflen is
 * too small (buf then holds ""); MC_INVALID_PARAMS when not set up (buf "" if given). */
MC_API int mc_store_get_hostname(mc_store *s, char *buf, size_t buflen);

/* mc_store_engine: the engine in use (borrowed, valid until close), NULL when not set
 * up. For the Python layer's `get_engine`-style sharing and the engine's counters. */
MC_API mc_te *mc_store_engine(mc_store *s);

/* mc_store_client_http_port: the port the client HTTP server listens on (setup with
 * enable_client_http_server; useful with client_http_port 0). It listens on the host of
 * the client's segment name, 127.0.0.1 for a loopback name ("localhost", 127.x), and
 * answers GET /health ("OK" while set up), /metrics (Prometheus text: put/get/remove
 * counts, failures by status, object and engine bytes, segment and local buffer sizes)
 * and /metrics/summary (one line); with a cluster secret other paths need signed
 * requests (docs/security.md). Stopped by close. Returns the port (1..65535), 0 when set
 * up without the server, MC_INVALID_PARAMS when not set up. Thread-safe. Ours: upstream
 * has no getter (its port is the one given). */
MC_API int mc_store_client_http_port(mc_store *s);

/* Health states (upstream health_check: HC_HEALTHY, HC_NOT_INITIALIZED,
 * HC_MASTER_UNREACHABLE). */
enum {
    MC_STORE_HEALTHY = 0,
    MC_STORE_NOT_INITIALIZED = 1,
    MC_STORE_MASTER_UNREACHABLE = 2,
};

/* mc_store_health_check: MC_STORE_NOT_INITIALIZED when not set up,
 * MC_STORE_MASTER_UNREACHABLE when the last heartbeat failed, else MC_STORE_HEALTHY. */
MC_API int mc_store_health_check(mc_store *s);

/* ---------------------------------------------------------------------------------- */
/* Replication config                                                                  */
/* ---------------------------------------------------------------------------------- */

/* Upstream SoftPinAction (HEAD). */
enum {
    MC_STORE_SOFT_PIN_PRESERVE = 0, /* new object: not pinned; upsert: keep as it was */
    MC_STORE_SOFT_PIN_ENABLE = 1,   /* pinned for soft_pin_ttl_ms from put_end          */
    MC_STORE_SOFT_PIN_DISABLE = 2,  /* not pinned (upsert: unpin)                       */
};

/* Per-put options (upstream ReplicateConfig, replica.h; upstream-mooncake.md §1.2).
 * Everything is borrowed for the call. Fill with mc_store_replicate_config_init. A NULL
 * config pointer means the defaults. */
typedef struct mc_store_replicate_config {
    uint32_t replica_num;          /* memory replicas wanted, 1..; 0 -> INVALID_PARAMS.
                                      Best effort: each on a distinct segment; fewer
                                      (>= 1) is success; clamped to MAX_REPLICAS */
    const char *const *preferred_segments; /* segment names ("host:port") tried first,
                                      in order; n_preferred_segments entries */
    size_t n_preferred_segments;   /* <= MC_STORE_MAX_PREFERRED */
    const char *preferred_segment; /* deprecated single name, tried after the list;
                                      NULL/"" = none */
    int soft_pin_action;           /* MC_STORE_SOFT_PIN_* (HEAD spelling) */
    bool with_soft_pin;            /* v0.3.12 spelling: true means ENABLE when the action
                                      is PRESERVE */
    bool soft_pin_ttl_set;         /* soft_pin_ttl_ms given (upstream Optional); only with
                                      ENABLE, else the master answers INVALID_PARAMS */
    uint64_t soft_pin_ttl_ms;      /* ms; 0 with ENABLE = ordinary cache object */
    bool with_hard_pin;            /* never evicted (removable with force) */
    bool prefer_alloc_in_same_node; /* local first. As upstream, only the multi-buffer
                                      puts accept it (they then prefer this client's own
                                      segment); put/put_from/put_parts/batch_put_from/
                                      upsert* return INVALID_PARAMS when it is set */
    const char *const *group_ids;  /* upstream group_ids: NULL = none; else one per key
                                      of the call (n_group_ids must equal the number of
                                      keys, else INVALID_PARAMS). Accepted and checked;
                                      the master does not group yet */
    size_t n_group_ids;
    uint32_t nof_replica_num;      /* NVMe-oF replicas: must be 0 (INVALID_PARAMS) */
    uint32_t dfs_replica_num;      /* DFS replicas: must be 0 (INVALID_PARAMS) */
    int data_type;                 /* upstream ObjectDataType tag; not used */
} mc_store_replicate_config;

/* mc_store_replicate_config_init: replica_num 1, nothing preferred, PRESERVE, no pins. */
MC_API void mc_store_replicate_config_init(mc_store_replicate_config *cfg);

/* ---------------------------------------------------------------------------------- */
/* Writes                                                                              */
/* ---------------------------------------------------------------------------------- */

/* mc_store_put: stores value (len bytes, borrowed for the call; len may be 0) under key
 * (upstream put / put_from: the bytes are written straight from value, no staging copy).
 * Returns MC_OK (also when the key already exists: the old value is kept);
 * MC_REPLICA_IS_NOT_READY (another writer's put of the key was still in flight after the
 * transfer timeout: nothing stored, see top);
 * MC_INVALID_PARAMS (bad key, NULL value with len > 0, bad config, not set up, a range
 * running past the end of a registered buffer it starts in: see top);
 * MC_NO_AVAILABLE_HANDLE (no segment can hold it, even after eviction: nothing is left
 * behind); MC_TRANSFER_FAIL / MC_RPC_TIMEOUT (writing a replica failed: revoked);
 * MC_RPC_FAIL / MC_RPC_TIMEOUT (master unreachable); MC_REPLICA_IS_GONE (the segment
 * the put was placed on was unmounted, e.g. its owner closed, while it was in flight,
 * and again when it was put a second time from put_start: nothing stored; a put that
 * meets this once at its put_end or revoke is put again by itself, on a segment left;
 * one that meets it while waiting for another writer's put of the same key returns
 * it). */
MC_API int mc_store_put(mc_store *s, const void *key, size_t key_len, const void *value,
                        size_t len, const mc_store_replicate_config *cfg);

/* mc_store_put_parts: the object is the concatenation of parts[0..nparts) (upstream
 * put_parts; nparts <= MC_STORE_MAX_PARTS, 0 = an empty object). Returns as put. */
MC_API int mc_store_put_parts(mc_store *s, const void *key, size_t key_len,
                              const mc_store_iov *parts, size_t nparts,
                              const mc_store_replicate_config *cfg);

/* mc_store_batch_put_from: n objects, values[i] of sizes[i] bytes (upstream
 * batch_put_from / put_batch). results[i]: as mc_store_put for key i. Duplicate keys:
 * the first position writes, later ones get its result. group_ids (when set) must have
 * n entries. n == 0 returns MC_OK. Returns MC_OK or a whole-call code (see top). */
MC_API int mc_store_batch_put_from(mc_store *s, const mc_store_key *keys, size_t n,
                                   const void *const *values, const uint64_t *sizes,
                                   const mc_store_replicate_config *cfg, int *results);

/* mc_store_batch_put_from_multi_buffers: object i is the concatenation of
 * iovs[i][0..iovcnt[i]) (upstream batch_put_from_multi_buffers; scatter-gather, no
 * staging). Accepts prefer_alloc_in_same_node. results[i] as mc_store_put. Returns as
 * batch_put_from. */
MC_API int mc_store_batch_put_from_multi_buffers(mc_store *s, const mc_store_key *keys,
                                                 size_t n, const mc_store_iov *const *iovs,
                                                 const size_t *iovcnt,
                                                 const mc_store_replicate_config *cfg,
                                                 int *results);

/* Upserts (upstream upsert / upsert_from / upsert_parts / upsert_batch /
 * batch_upsert_from; UpsertStart/End/Revoke): insert, or replace the value of an
 * existing key (same size: in place; other size, or a reader holding a lease on the old
 * value: new space, the old kept until the lease ends, as upstream). Same arguments and
 * codes as the put forms (without the wait for another writer), plus
 * MC_OBJECT_ALREADY_EXISTS (another write of the key is in flight). A failed upsert of
 * an existing key erases it (its old bytes may be partly overwritten). */
MC_API int mc_store_upsert(mc_store *s, const void *key, size_t key_len, const void *value,
                           size_t len, const mc_store_replicate_config *cfg);
MC_API int mc_store_upsert_parts(mc_store *s, const void *key, size_t key_len,
                                 const mc_store_iov *parts, size_t nparts,
                                 const mc_store_replicate_config *cfg);
MC_API int mc_store_batch_upsert_from(mc_store *s, const mc_store_key *keys, size_t n,
                                      const void *const *values, const uint64_t *sizes,
                                      const mc_store_replicate_config *cfg, int *results);
MC_API int mc_store_batch_upsert_from_multi_buffers(mc_store *s, const mc_store_key *keys,
                                                    size_t n,
                                                    const mc_store_iov *const *iovs,
                                                    const size_t *iovcnt,
                                                    const mc_store_replicate_config *cfg,
                                                    int *results);

/* ---------------------------------------------------------------------------------- */
/* Reads                                                                               */
/* ---------------------------------------------------------------------------------- */

/* mc_store_get_into: reads the object into buf (capacity cap bytes; upstream get_into).
 * Returns the object's size in bytes (>= 0; buf may be larger, the rest is untouched);
 * MC_INVALID_PARAMS (bad key; NULL buf with cap > 0; cap smaller than the object,
 * detected before any transfer; [buf, buf+cap) starts inside a registered buffer and
 * runs past its end (see top); not set up); MC_OBJECT_NOT_FOUND (miss);
 * MC_REPLICA_IS_NOT_READY (only a write in flight); MC_LEASE_EXPIRED (the lease ran out
 * before the read finished: buf contents are undefined); MC_TRANSFER_FAIL /
 * MC_RPC_TIMEOUT (every replica failed; buf contents are undefined too: an attempt cut
 * off by its deadline or a dropped connection may have landed part of its bytes before
 * its connection was closed, never later); MC_RPC_FAIL (master unreachable). On any
 * error the returned code is the answer: never read buf. */
MC_API int64_t mc_store_get_into(mc_store *s, const void *key, size_t key_len, void *buf,
                                 uint64_t cap);

/* Allocator for the *_with calls: called once the object's size is known (after the one
 * get_replica_list RPC, before the transfer) on the calling thread. index is the key's
 * position (0 for single calls); size may be 0. Returns memory for at least size bytes
 * (the caller's; the store only writes into it), or NULL to give up on that key
 * (result MC_INTERNAL_ERROR; for size 0 a NULL return is fine and not an error).
 * It runs inside the store call (the store's call lock is held shared): it must not call
 * any mc_store_* function on the same store, and must not wait for a thread that is in
 * mc_store_close (a Python binding releases the GIL around close, so an allocator that
 * takes the GIL is fine). */
typedef void *(*mc_store_alloc_fn)(void *ctx, size_t index, uint64_t size);

/* mc_store_get_with: reads the object into memory obtained from alloc(ctx, 0, size), in
 * one master RPC (what Python `get` uses to fill a bytes object). *out receives the
 * pointer alloc returned (NULL for size 0 if alloc returned NULL). Whether the call
 * fails or not, memory alloc returned is the caller's to free. Returns the size, or as
 * get_into (MC_INTERNAL_ERROR when alloc returned NULL for size > 0). */
MC_API int64_t mc_store_get_with(mc_store *s, const void *key, size_t key_len,
                                 mc_store_alloc_fn alloc, void *ctx, void **out);

/* mc_store_get_alloc: mc_store_get_with into malloc'd memory: on success *out is a new
 * buffer of the returned size plus one NUL byte (not counted; so *out is never NULL on
 * success); free with free(). On error *out is NULL. */
MC_API int64_t mc_store_get_alloc(mc_store *s, const void *key, size_t key_len, void **out);

/* mc_store_batch_get_into: results[i] = bytes read into bufs[i] (capacity caps[i]) or
 * a negative code, as get_into (upstream batch_get_into). One batch_get_replica_list,
 * one engine batch. Duplicate keys: each position is filled. Returns MC_OK or a
 * whole-call code. */
MC_API int mc_store_batch_get_into(mc_store *s, const mc_store_key *keys, size_t n,
                                   void *const *bufs, const uint64_t *caps, int64_t *results);

/* mc_store_batch_get_into_multi_buffers: object i is scattered in order over
 * iovs[i][0..iovcnt[i]) (upstream batch_get_into_multi_buffers); results[i] = the
 * object's size, or MC_INVALID_PARAMS when the iovs together hold fewer bytes, or as
 * get_into. prefer_same_node: accepted (replica choice is always local first). */
MC_API int mc_store_batch_get_into_multi_buffers(mc_store *s, const mc_store_key *keys,
                                                 size_t n, const mc_store_iov *const *iovs,
                                                 const size_t *iovcnt, bool prefer_same_node,
                                                 int64_t *results);

/* mc_store_batch_get_with: batch form of get_with (Python get_batch): alloc(ctx, i,
 * size_i) per key found; outs[i] receives its pointer (NULL on a miss/error before
 * allocation); results[i] = size or negative. Memory alloc returned is the caller's
 * whatever the result. Returns MC_OK or a whole-call code. */
MC_API int mc_store_batch_get_with(mc_store *s, const mc_store_key *keys, size_t n,
                                   mc_store_alloc_fn alloc, void *ctx, void **outs,
                                   int64_t *results);

/* ---------------------------------------------------------------------------------- */
/* Local buffer and handles (Python BufferHandle, get_buffer, BufferPool)              */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_store_buffer mc_store_buffer; /* a slice of memory owned by a handle */

/* mc_store_get_buffer: reads the object into a new slice of the local buffer (falling
 * back to malloc'd memory when the local buffer is full or 0) and returns a handle to
 * it (upstream get_buffer / BufferHandle, zero copy after the read). The handle stays
 * valid after close (the memory is freed with the last handle). A zero-length object
 * gives a handle of size 0 (data NULL): the object exists (API.md §5).
 * *out receives a new handle (free with mc_store_buffer_free) on MC_OK, NULL otherwise.
 * Returns MC_OK or the get_into codes (never INVALID_PARAMS for capacity). */
MC_API int mc_store_get_buffer(mc_store *s, const void *key, size_t key_len,
                               mc_store_buffer **out);

/* mc_store_batch_get_buffer: per key: outs[i] a new handle and results[i] the size, or
 * outs[i] NULL and results[i] negative. One RPC, one engine batch. Returns MC_OK or a
 * whole-call code (outs all NULL). */
MC_API int mc_store_batch_get_buffer(mc_store *s, const mc_store_key *keys, size_t n,
                                     mc_store_buffer **outs, int64_t *results);

/* mc_store_buffer_alloc: a new handle for size bytes (> 0) of the local buffer (not
 * zeroed), for zero-copy puts from registered memory (BufferPool). Returns MC_OK;
 * MC_NO_AVAILABLE_HANDLE (the local buffer cannot hold it: no fallback here);
 * MC_INVALID_PARAMS (size 0, not set up). */
MC_API int mc_store_buffer_alloc(mc_store *s, uint64_t size, mc_store_buffer **out);

/* mc_store_buffer_data / _size: the slice (data NULL when size is 0). Thread-safe reads;
 * valid until mc_store_buffer_free. */
MC_API void *mc_store_buffer_data(const mc_store_buffer *b);
MC_API uint64_t mc_store_buffer_size(const mc_store_buffer *b);

/* mc_store_buffer_free: returns the slice to the local buffer (or frees the malloc'd
 * fallback). May run after the store was closed or destroyed. NULL is a no-op. */
MC_API void mc_store_buffer_free(mc_store_buffer *b);

/* mc_store_local_buffer_info: the local buffer's address and size (bytes; 0/NULL when
 * none) and the bytes handed out now. Returns MC_OK or MC_INVALID_PARAMS (not set up).
 * Any pointer may be NULL. */
MC_API int mc_store_local_buffer_info(mc_store *s, void **base, uint64_t *size,
                                      uint64_t *used);

/* ---------------------------------------------------------------------------------- */
/* Queries and removal                                                                 */
/* ---------------------------------------------------------------------------------- */

/* mc_store_is_exist: 1 when the object exists with a complete replica (a read lease is
 * granted, as upstream ExistKey), 0 when absent or still being written, negative on
 * error (MC_INVALID_PARAMS bad key / not set up, MC_RPC_FAIL ...). */
MC_API int mc_store_is_exist(mc_store *s, const void *key, size_t key_len);

/* mc_store_batch_is_exist: results[i] = 1 / 0 / negative per key. One RPC. Returns MC_OK
 * or a whole-call code. */
MC_API int mc_store_batch_is_exist(mc_store *s, const mc_store_key *keys, size_t n,
                                   int *results);

/* mc_store_get_size: the object's size in bytes (>= 0), or MC_OBJECT_NOT_FOUND,
 * MC_REPLICA_IS_NOT_READY, MC_INVALID_PARAMS, transport codes (upstream get_size; grants
 * a lease like every replica-list lookup). */
MC_API int64_t mc_store_get_size(mc_store *s, const void *key, size_t key_len);

/* mc_store_remove: erases the object (upstream remove). Returns MC_OK;
 * MC_OBJECT_NOT_FOUND; MC_OBJECT_HAS_LEASE (a reader's lease is active and !force);
 * MC_REPLICA_IS_NOT_READY (a write is in flight, even with force); MC_INVALID_PARAMS;
 * transport codes. */
MC_API int mc_store_remove(mc_store *s, const void *key, size_t key_len, bool force);

/* mc_store_batch_remove: results[i] as mc_store_remove. One RPC. */
MC_API int mc_store_batch_remove(mc_store *s, const mc_store_key *keys, size_t n, bool force,
                                 int *results);

/* mc_store_batch_replica_clear (upstream batch_replica_clear / BatchReplicaClear): for each
 * of the n keys, drops the replicas that lie on the segment named segment_name (the name
 * a store mounts its segment with, "host:port" as mc_store's local hostname; NUL-
 * terminated, < MC_STORE_NAME_MAX bytes), or the whole object when segment_name is NULL
 * or "". An object left with no replica is erased (its key is gone). The space comes
 * back to the segments at once. Only objects this store wrote (its client id put or
 * upserted them) may be cleared, and only while no reader's lease is active; pins do
 * not stop it. results[i] (caller's array of n): MC_OK (cleared); MC_OBJECT_NOT_FOUND;
 * MC_ILLEGAL_CLIENT (another client's object); MC_OBJECT_HAS_LEASE; MC_REPLICA_IS_NOT_READY
 * (a write in flight); MC_REPLICA_NOT_FOUND (no replica on segment_name);
 * MC_INVALID_PARAMS (bad key, or a segment_name too long: then every result); transport
 * codes. Upstream's Python form returns the keys whose result is MC_OK, in order.
 * Returns MC_OK once the call ran (per-key outcomes are in results), MC_INVALID_PARAMS
 * for NULL results or n > MC_STORE_MAX_BATCH, or the store's not-set-up code. Batches
 * go in one RPC per chunk. Thread-safe (shares the store's read lock with other calls). */
MC_API int mc_store_batch_replica_clear(mc_store *s, const mc_store_key *keys, size_t n,
                                        const char *segment_name, int *results);

/* mc_store_remove_by_regex: removes every complete object whose key matches the PCRE2
 * pattern (pattern_len bytes; unanchored search, as upstream std::regex_search),
 * skipping leased objects unless force. Returns the number removed (>= 0), or
 * MC_INVALID_PARAMS (bad or too long pattern, not set up), transport codes. */
MC_API int64_t mc_store_remove_by_regex(mc_store *s, const char *pattern, size_t pattern_len,
                                        bool force);

/* mc_store_remove_all: removes every complete object, skipping leased ones unless force.
 * Returns the number removed (>= 0) or a negative code. */
MC_API int64_t mc_store_remove_all(mc_store *s, bool force);

/* One replica (upstream Replica::Descriptor with a MemoryDescriptor: status and
 * AllocatedBuffer::Descriptor{size, buffer_address, transport_endpoint}). Plain value. */
typedef struct mc_store_replica_desc {
    int status;               /* upstream ReplicaStatus: 3 = COMPLETE (only those are
                                 returned by lookups) */
    bool is_memory;           /* a memory replica (replica_type 0) */
    uint64_t size;            /* bytes */
    uint64_t buffer_address;  /* address in the owner's process */
    char transport_endpoint[MC_STORE_NAME_MAX]; /* owner's segment name "host:port" */
    char protocol[MC_STORE_PROTOCOL_MAX];
    int replica_type;         /* upstream ReplicaType: 0 MEMORY, 2 LOCAL_DISK (on the disk
                                 tier of the client at transport_endpoint; buffer_address
                                 0; docs/ssd-tier.md) */
} mc_store_replica_desc;

typedef struct mc_store_replica_list {
    uint32_t n;               /* <= MC_STORE_MAX_REPLICAS */
    uint64_t lease_ttl_ms;    /* the read lease this lookup was granted */
    mc_store_replica_desc replicas[MC_STORE_MAX_REPLICAS];
} mc_store_replica_list;

/* mc_store_get_replica_desc: the object's complete replicas (upstream get_replica_desc;
 * grants a lease). out: caller's storage; n = 0 on error. Returns MC_OK or as get_size. */
MC_API int mc_store_get_replica_desc(mc_store *s, const void *key, size_t key_len,
                                     mc_store_replica_list *out);

/* mc_store_batch_get_replica_desc: outs[i] / results[i] per key (upstream
 * batch_get_replica_desc omits missing keys from its dict; the Python layer does that
 * from results[i] != MC_OK). One RPC. */
MC_API int mc_store_batch_get_replica_desc(mc_store *s, const mc_store_key *keys, size_t n,
                                           mc_store_replica_list *outs, int *results);

/* ---------------------------------------------------------------------------------- */
/* Registration                                                                        */
/* ---------------------------------------------------------------------------------- */

/* mc_store_register_buffer: records [addr, addr+len) for the zero-copy calls' bounds
 * check (upstream register_buffer; not required before put_from/get_into here, see top):
 * a range starting inside it must end inside it; overlapping registrations are allowed,
 * any one that holds the range will do. The same addr and len again is MC_OK (nothing
 * changes). The memory stays the caller's; the record lasts until unregister_buffer or
 * close. It is not registered with the transfer engine nor published (upstream registers
 * it with its engine for RDMA; this engine moves local memory over TCP and same-host
 * copies without a registration, and republishing the segment descriptor on every call
 * made n registrations cost O(n^2)). O(log n) per call in the ranges held.
 * Returns MC_OK; MC_INVALID_PARAMS (NULL, 0, addr+len past the address space, same addr
 * with another length, not set up); MC_BUFFER_OVERFLOW when MC_STORE_MAX_USER_BUFFERS
 * ranges are held already (logged with the limit; nothing changes). */
MC_API int mc_store_register_buffer(mc_store *s, void *addr, size_t len);

/* mc_store_unregister_buffer: removes the registration that starts at addr (the memory is
 * then plain caller memory for put_from/get_into). O(log n). Returns MC_OK;
 * MC_INVALID_PARAMS (not registered, not set up). */
MC_API int mc_store_unregister_buffer(mc_store *s, void *addr);

/* ---------------------------------------------------------------------------------- */
/* Ranged I/O and sessions (ranges.c)                                                  */
/* ---------------------------------------------------------------------------------- */
/* Upstream: store_py.cpp / real_client.cpp get_into_ranges, batch_get_session_start /
 * batch_get_into_multi_buffer_ranges / batch_get_session_end, batch_put_session_start /
 * batch_put_from_multi_buffer_ranges / batch_put_session_end / _revoke (HEAD; the Python
 * layer holds the sessions, see docs/sessions.md). The C side is stateless: a lease or a
 * reservation is a plain value the caller keeps and passes back.
 * Transfers: one engine batch per replica round for all items of a call (own segment:
 * memcpy; same host: the engine's shared memory; else TCP). A failed replica of a read
 * is followed by the next one (best first: own, same host, elsewhere); no hedging and no
 * per-attempt deadline (the engine's transfer timeout ends an attempt), unlike read.c. */

/* One fragment: len bytes between caller memory buf and the object's bytes
 * [offset, offset+len). result is written by the call: len on success, else a negative
 * code for this fragment (MC_INVALID_PARAMS: len 0 is fine and moves nothing; NULL buf
 * with len > 0, offset+len past the object, or a buffer range that runs past the end of
 * a registered buffer it starts in; the item's code when the item failed as a whole). */
typedef struct mc_store_range {
    void *buf;
    uint64_t offset; /* bytes from the object's start */
    uint64_t len;    /* bytes */
    int64_t result;  /* out */
} mc_store_range;

/* A read lease on one object: its complete replicas as the lookup returned them, its
 * size, and when the lease ends. Plain value (copy it freely); the addresses in it are
 * only trusted by these calls, which check them against the lease's own replicas. */
typedef struct mc_store_lease {
    mc_store_replica_list replicas; /* COMPLETE replicas; replicas.lease_ttl_ms granted */
    uint64_t size;                  /* bytes */
    uint64_t deadline_ms;           /* end of the lease on the mc_now_ms() clock, measured
                                       from just before the lookup was sent; bytes are
                                       trusted only while now + 1 < deadline_ms */
} mc_store_lease;

/* mc_store_batch_get_lease: one batch_get_replica_list for keys[0..n): outs[i] the lease
 * of key i when results[i] == MC_OK, else results[i] as mc_store_get_size (OBJECT_NOT_FOUND,
 * REPLICA_IS_NOT_READY, ...). No bytes move. Returns MC_OK or a whole-call code. */
MC_API int mc_store_batch_get_lease(mc_store *s, const mc_store_key *keys, size_t n,
                                    mc_store_lease *outs, int *results);

/* mc_store_batch_read_ranges: item i reads ranges[i][0..nranges[i]) of the object leased
 * in *leases[i] (no master RPC). results[i] = the sum of the fragments' lengths when every
 * fragment was read, else the first failing fragment's code (fragments read before it keep
 * their bytes and result). MC_LEASE_EXPIRED for every fragment of an item whose lease had
 * ended before the read started or ended before the read finished (the bytes may have been
 * overwritten); MC_INVALID_PARAMS for a NULL lease or nranges[i] > MC_STORE_MAX_PARTS;
 * MC_TRANSFER_FAIL / MC_RPC_TIMEOUT when every replica failed. Returns MC_OK or a
 * whole-call code (not set up, NULL arrays, n > MC_STORE_MAX_BATCH). */
MC_API int mc_store_batch_read_ranges(mc_store *s, const mc_store_lease *const *leases, size_t n,
                                      mc_store_range *const *ranges, const size_t *nranges,
                                      int64_t *results);

/* mc_store_batch_get_ranges: lease (one RPC) then read, as the two calls above; results[i]
 * as mc_store_batch_read_ranges, or the lookup's code for every fragment of a key that
 * could not be leased. Returns MC_OK or a whole-call code. */
MC_API int mc_store_batch_get_ranges(mc_store *s, const mc_store_key *keys, size_t n,
                                     mc_store_range *const *ranges, const size_t *nranges,
                                     int64_t *results);

/* mc_store_buffer_holds: true when one buffer registered with mc_store_register_buffer
 * holds all of [addr, addr+len) (len >= 1); false otherwise or when not set up. For the
 * ranged gather (Python get_into_ranges), whose destination check is against the
 * registered size of the destination buffer, as upstream's. */
MC_API bool mc_store_buffer_holds(mc_store *s, const void *addr, uint64_t len);

/* Space reserved for an object that is written range by range: the PROCESSING replicas
 * put_start returned and the object's size. Plain value. */
typedef struct mc_store_reservation {
    mc_store_replica_list replicas;
    uint64_t size; /* bytes */
    /* the fence epoch of each replica (put_start's, docs/consistency.md): every write
     * into replicas[j] carries fence_epochs[j], so a write of an aborted or discarded
     * reservation that lands late is refused by the owner */
    uint64_t fence_epochs[MC_STORE_MAX_REPLICAS];
} mc_store_reservation;

/* mc_store_batch_put_reserve: one batch_put_start for keys[i] of sizes[i] bytes (cfg as
 * mc_store_batch_put_from, prefer_alloc_in_same_node accepted): outs[i] on results[i] ==
 * MC_OK. Nothing is written and the object is not readable until
 * mc_store_batch_put_commit; a reservation never committed nor aborted is released by the
 * master after --put_start_discard_timeout_sec. results[i]: MC_OK,
 * MC_OBJECT_ALREADY_EXISTS (the key exists or another write of it is in flight: nothing
 * reserved), MC_NO_AVAILABLE_HANDLE, MC_INVALID_PARAMS (bad key or config), transport
 * codes. Returns MC_OK or a whole-call code. */
MC_API int mc_store_batch_put_reserve(mc_store *s, const mc_store_key *keys,
                                      const uint64_t *sizes, size_t n,
                                      const mc_store_replicate_config *cfg,
                                      mc_store_reservation *outs, int *results);

/* mc_store_batch_write_ranges: item i writes ranges[i][0..nranges[i]) (buf -> object
 * bytes [offset, offset+len)) into every replica of *res[i]. results[i] = the sum of the
 * fragments' lengths, or the first failing fragment's code (MC_INVALID_PARAMS as
 * mc_store_range; MC_TRANSFER_FAIL / MC_RPC_TIMEOUT when a replica could not be written:
 * the object then holds undefined bytes there, and the caller should abort it). A failed
 * write is not revoked here: the session owner decides. Returns MC_OK or a whole-call
 * code. */
MC_API int mc_store_batch_write_ranges(mc_store *s, const mc_store_reservation *const *res,
                                       size_t n, mc_store_range *const *ranges,
                                       const size_t *nranges, int64_t *results);

/* mc_store_batch_put_commit / _abort: put_end (the object becomes readable) / put_revoke
 * (its space is freed) of reserved keys. results[i]: MC_OK; MC_OBJECT_NOT_FOUND (nothing
 * reserved, or the reservation was discarded after the master's timeout);
 * MC_REPLICA_IS_GONE (every segment of the reservation was unmounted meanwhile, e.g. its
 * owner closed: nothing stored; reserve and write again, the caller holds the bytes);
 * MC_ILLEGAL_CLIENT (reserved by another client); transport codes. Returns MC_OK or a
 * whole-call code. */
MC_API int mc_store_batch_put_commit(mc_store *s, const mc_store_key *keys, size_t n,
                                     int *results);
MC_API int mc_store_batch_put_abort(mc_store *s, const mc_store_key *keys, size_t n,
                                    int *results);

/* ---- extra segments (segments.c): upstream RealClient::mountSegment & co. ---- */

/* A segment id as text: "<hi>-<lo>", two 16-digit lower-case hex numbers (the master's
 * 128-bit segment UUID), NUL included. */
#define MC_STORE_SEGMENT_ID_LEN 34u
#define MC_STORE_MAX_EXTRA_SEGMENTS 1024u /* extra segments one client holds at once */

/* mc_store_mount_segment: maps [offset, offset + size) of the file at path (a regular
 * file or /dev/shm object the caller created, at least offset + size bytes; MAP_SHARED,
 * read-write), registers it with the transfer engine and mounts it on the master as one
 * more segment of this client (name = this client's "host:port"), which the master then
 * allocates replicas in. offset: a multiple of the page size. size: >=
 * MC_STORE_MIN_SEGMENT_SIZE. protocol: NULL/"" means the client's; it must be the
 * client's protocol (only one transport per client). location: NULL/""/"*"/"cpu:N"
 * (CPU memory only). id_out (>= MC_STORE_SEGMENT_ID_LEN bytes) receives the new id.
 * Returns MC_OK; MC_INVALID_PARAMS (not set up, bad arguments, file cannot be opened or
 * mapped, too many segments, or a range that overlaps bytes of the same file (same
 * device and inode, whatever the path) this client has mounted already, retiring segments
 * included: two segments over one memory would overwrite each other's objects; ours, not
 * upstream's); the engine's or the master's code (nothing is left mapped
 * or mounted then). The mapping is the client's until the segment is unmounted or the
 * client closes (the file itself is the caller's). Threads: any. */
MC_API int mc_store_mount_segment(mc_store *s, const char *path, uint64_t size, uint64_t offset,
                                  const char *protocol, const char *location, char *id_out);

/* mc_store_allocate_and_mount_segment: as mc_store_mount_segment over size bytes of new
 * shared memory the client allocates (the transfer engine's mc_te_alloc_shared, so
 * same-host peers map it directly). *allocated receives the bytes allocated (= size). */
MC_API int mc_store_allocate_and_mount_segment(mc_store *s, uint64_t size, const char *protocol,
                                               const char *location, char *id_out,
                                               uint64_t *allocated);

/* mc_store_unmount_segment: unmounts an extra segment (either kind) by id. grace_ms 0:
 * at once (the master drops its replicas; objects left with none are erased), then the
 * memory is unregistered and released. grace_ms > 0 (upstream GracefulUnmountSegment):
 * the segment takes no new allocation from now on, its replicas stay readable for
 * grace_ms, then the master drops them; the client keeps the memory registered until
 * then (plus one second for the master's tick) and releases it at its next segment call
 * after that or at close. Returns MC_OK; MC_SEGMENT_NOT_FOUND (no such extra segment of
 * this client, or already unmounting; the global segment of setup is not one);
 * MC_INVALID_PARAMS (not set up, bad id, grace over 24 h); the master's code (the
 * segment then stays mounted). Threads: any. */
MC_API int mc_store_unmount_segment(mc_store *s, const char *id, uint64_t grace_ms);

/* mc_store_extra_segment_count: extra segments held (mounted or in their grace period). */
MC_API size_t mc_store_extra_segment_count(mc_store *s);


/* ---- replica copy / move tasks (upstream create_copy_task / create_move_task /
 * query_task; src/client/tasks.c, src/master/tasks.c) ----
 * The master reserves the new replica on each target segment; the client that owns the
 * target (the executor) reads the bytes from a source replica into it over its transfer
 * engine and reports; the replica becomes visible (COMPLETE) only then. A move then
 * drops the source replica (after an active reader's lease ends). Task ids are upstream
 * UUIDs: two uint64 (id[0] high, id[1] low). */

/* Upstream TaskType / TaskStatus. */
enum { MC_STORE_TASK_REPLICA_COPY = 0, MC_STORE_TASK_REPLICA_MOVE = 1 };
enum {
    MC_STORE_TASK_PENDING = 0,
    MC_STORE_TASK_PROCESSING = 1,
    MC_STORE_TASK_SUCCESS = 2,
    MC_STORE_TASK_FAILED = 3,
};

/* Upstream QueryTaskResponse. Times: wall-clock ms since the epoch. */
typedef struct mc_store_task_info {
    uint64_t id[2];
    int type, status;
    uint64_t created_at_ms_epoch, last_updated_at_ms_epoch;
    uint64_t assigned_client[2]; /* the executing client (owner of the first target) */
    char message[256];           /* why it failed ("" otherwise) */
} mc_store_task_info;

/* mc_store_create_copy_task: a task adding a memory replica of key on each of the n
 * (1..8) target segments (names as ReplicaDescriptor endpoints, "host:port"). *id = the
 * task. Returns MC_OK; MC_OBJECT_NOT_FOUND (no such key, or being written);
 * MC_SEGMENT_NOT_FOUND (a target not mounted); MC_REPLICA_ALREADY_EXISTS (a target holds
 * one already); MC_NO_AVAILABLE_HANDLE (no room on a target); MC_INVALID_PARAMS;
 * MC_TASK_PENDING_LIMIT_EXCEEDED; transport codes; the not-set-up code. Thread-safe. */
MC_API int mc_store_create_copy_task(mc_store *s, const void *key, size_t key_len,
                                     const char *const *targets, size_t n, uint64_t id[2]);

/* mc_store_create_move_task: a task moving key's replica on segment source to target.
 * Codes as mc_store_create_copy_task, plus MC_INVALID_PARAMS when source == target or
 * target holds a replica already, MC_REPLICA_NOT_FOUND (none on source). */
MC_API int mc_store_create_move_task(mc_store *s, const void *key, size_t key_len,
                                     const char *source, const char *target, uint64_t id[2]);

/* mc_store_query_task: *out = the task's state. MC_OK; MC_TASK_NOT_FOUND (unknown or
 * forgotten: the master keeps max_total_finished_tasks finished ones); transport codes. */
MC_API int mc_store_query_task(mc_store *s, const uint64_t id[2], mc_store_task_info *out);

#endif
