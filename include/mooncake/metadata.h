/* metadata.h: the metadata service of the transfer engine.
 *
 * Four parts, all thread-safe unless said otherwise:
 *   1. Connection strings (mc_metadata_parse_conn): which backend a `metadata_server`
 *      string names, as upstream (upstream-mooncake.md §6.1, `transfer_metadata.cpp`
 *      extractProtocolFromConnString and `transfer_metadata_plugin.cpp`).
 *   2. A key-value client over a backend (mc_metadata_create + get/put/delete), plus
 *      typed helpers for the two kinds of keys the engine publishes. Backends: HTTP
 *      (libcurl; `GET|PUT|DELETE <url>?key=<urlencoded key>`), P2PHANDSHAKE (no central
 *      store: puts are no-ops, gets find nothing; the engine asks peers over its handshake
 *      port), etcd v3 (its HTTP/JSON gateway over libcurl, several endpoints with
 *      failover; backend_etcd.c) and Redis (hiredis, optional AUTH and SELECT, reconnect;
 *      backend_redis.c, built when hiredis is found: otherwise MC_NOT_SUPPORTED). Every
 *      backend stores the same keys and values and returns the same codes.
 *   3. Keys and JSON (upstream §6.2): `mooncake/[<cluster>/]ram/<segment>` holds a segment
 *      descriptor, `mooncake/[<cluster>/]rpc_meta/<server>` holds
 *      `{"ip_or_host_name": "...", "rpc_port": N}`. The descriptor codec adds mooncake-c
 *      fields for the same-host shared-memory path (`host_id`, `shm_socket`, per-buffer
 *      `shm`); upstream peers ignore them and upstream descriptors decode without them.
 *   4. The embeddable HTTP metadata server (libmicrohttpd), the one the master runs with
 *      --enable_http_metadata_server and `mooncake_http_metadata_server` runs alone
 *      (upstream §7, API.md §4).
 *
 * Return values: the client, codec and key functions return upstream status codes
 * (status.h): MC_OK (0) or a negative MC_* value named in each comment. The server's
 * start function returns 0 or a negative errno, because its failures are socket errors
 * the caller reports as such (-EADDRINUSE: the port is taken).
 */
#ifndef MOONCAKE_METADATA_H
#define MOONCAKE_METADATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/mc_api.h"

/* ---------------------------------------------------------------------------------- */
/* 1. Connection strings                                                              */
/* ---------------------------------------------------------------------------------- */

/* The literal upstream uses for "no metadata server, exchange over the handshake port". */
#define MC_METADATA_P2PHANDSHAKE "P2PHANDSHAKE"

#define MC_METADATA_MAX_ENDPOINTS 16  /* endpoints in one etcd connection string */
#define MC_METADATA_MAX_HOST 256      /* bytes of one host name, with the NUL */
#define MC_METADATA_MAX_URL 2048      /* bytes of an HTTP URL, with the NUL */
#define MC_METADATA_MAX_SECRET 256    /* bytes of a Redis user name or password, with NUL */

typedef enum mc_metadata_kind {
    MC_METADATA_P2P = 0,   /* "P2PHANDSHAKE" (exact, case-sensitive, as upstream) */
    MC_METADATA_HTTP = 1,  /* "http://host[:port][/path]" or "https://..." */
    MC_METADATA_ETCD = 2,  /* "etcd://h:p[,h:p...]" or a bare "h:p[,h:p...]" */
    MC_METADATA_REDIS = 3, /* "redis://[[user]:password@]h[:p][/db]" */
} mc_metadata_kind;

typedef struct mc_metadata_endpoint {
    char host[MC_METADATA_MAX_HOST]; /* name or address; IPv6 without the brackets */
    uint16_t port;                   /* 1..65535; a default when the string had none */
} mc_metadata_endpoint;

/* A parsed connection string. Plain data (no pointers): copy it freely. */
typedef struct mc_metadata_conn {
    mc_metadata_kind kind;
    char url[MC_METADATA_MAX_URL]; /* HTTP: the URL as given (requests append ?key=);
                                      etcd, Redis: a canonical form for messages
                                      ("etcd://h:p,h:p", "redis://h:p[/db]", never the
                                      password; cut at MAX_URL-1 bytes); P2P: "" */
    size_t n_endpoints;            /* P2P: 0; HTTP, Redis: 1; etcd: 1..MAX_ENDPOINTS */
    mc_metadata_endpoint endpoints[MC_METADATA_MAX_ENDPOINTS];
    char username[MC_METADATA_MAX_SECRET]; /* Redis: ACL user for AUTH; "" = none */
    char password[MC_METADATA_MAX_SECRET]; /* Redis: AUTH password; "" = none given */
    int db;                                /* Redis: SELECT index 0..INT32_MAX; -1 = none
                                              given; other kinds: -1 */
} mc_metadata_conn;

/* mc_metadata_parse_conn: classifies and splits a `metadata_server` string.
 *   conn: NUL-terminated, borrowed. Rules (upstream `extractProtocolFromConnString`):
 *     "P2PHANDSHAKE" -> P2P; "http://" / "https://" -> HTTP (host required, port
 *     defaults to 80 / 443, any path and query kept in url); "etcd://" or no "://" at
 *     all -> etcd, a list of host[:port] separated by ',' (or ';', the separator of
 *     upstream's etcd locators), port defaulting to 2379 (so upstream's canonical
 *     `metadata_server="192.168.0.1:2379"` is etcd; an HTTP metadata server needs its
 *     http:// URL); "redis://[[user]:password@]host[:port][/db]" -> Redis (port defaults
 *     to 6379; user and password percent-decoded; db decimal; a bare "/" = no db). IPv6
 *     hosts are written "[::1]:2379". Any other scheme, an empty string or list item, a
 *     bad or zero port, whitespace or a control character, more than
 *     MC_METADATA_MAX_ENDPOINTS endpoints, a path, query or credentials where the form
 *     has none, several Redis hosts, a userinfo without ':', a db that is not a decimal
 *     0..INT32_MAX, or a host/URL/secret too long for the fields is an error.
 *   out: filled on success (caller's storage); untouched fields are zeroed.
 *   err/errlen: optional (may be NULL/0); receives a one-line reason on error.
 * Returns MC_OK or MC_INVALID_PARAMS. */
MC_API int mc_metadata_parse_conn(const char *conn, mc_metadata_conn *out, char *err,
                                  size_t errlen);

/* mc_metadata_kind_name: "p2p", "http", "etcd", "redis" (static), "?" when unknown. */
MC_API const char *mc_metadata_kind_name(mc_metadata_kind kind);

/* ---------------------------------------------------------------------------------- */
/* 2. Key-value client                                                                */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_metadata mc_metadata; /* opaque; one per engine */
struct mc_auth_secret;                  /* src/common/auth.h */

#define MC_METADATA_DEFAULT_TIMEOUT_MS 10000u
#define MC_METADATA_DEFAULT_CONNECT_TIMEOUT_MS 3000u
#define MC_METADATA_DEFAULT_MAX_VALUE (16u << 20) /* bytes */
#define MC_METADATA_MAX_KEY 4096                  /* bytes of a key, without the NUL */

typedef struct mc_metadata_opts {
    uint32_t timeout_ms;         /* one whole request; 0 = MC_METADATA_DEFAULT_TIMEOUT_MS */
    uint32_t connect_timeout_ms; /* 0 = MC_METADATA_DEFAULT_CONNECT_TIMEOUT_MS */
    uint64_t max_value_bytes;    /* largest value got or put; 0 = DEFAULT_MAX_VALUE */
    const char *cluster_id;      /* key namespace; NULL = env MC_METADATA_CLUSTER_ID;
                                    "" = none. Copied at create. */
    const struct mc_auth_secret *auth_secret; /* HTTP: the cluster secret every request is
                                    signed with (src/common/auth.h; copied at create);
                                    NULL = the token file MC_AUTH_TOKEN_FILE names (unset:
                                    none, requests go unsigned) */
} mc_metadata_opts;

/* mc_metadata_create: a client for the backend `conn` names (see mc_metadata_parse_conn).
 *   conn: borrowed. out: receives a new client; free it with mc_metadata_destroy.
 *   The key prefix ("mooncake/" + cluster id + "/") is fixed here from the environment
 *   variable MC_METADATA_CLUSTER_ID (unset or empty: none), as upstream's TransferMetadata
 *   constructor. No network traffic happens here: HTTP and etcd connect per request,
 *   Redis at its first call (and again after a connection error).
 *   Redis: AUTH uses the URL's password, else env MC_REDIS_PASSWORD (upstream's name);
 *   SELECT the URL's db, else env MC_REDIS_DB_INDEX (0..INT32_MAX) when set. A process
 *   using Redis should ignore SIGPIPE (Python and our tools do): hiredis writes with
 *   write(2).
 *   HTTP: with a cluster secret (opts.auth_secret, else the token file
 *   MC_AUTH_TOKEN_FILE names) every request carries an MC-HMAC Authorization
 *   (src/net/httpd.h); a server that refuses it (HTTP 401) fails the call with
 *   MC_ILLEGAL_CLIENT, logged saying which side lacks the secret or that they differ.
 * Returns MC_OK; MC_INVALID_PARAMS for a malformed string, a bad MC_REDIS_DB_INDEX or an
 * unusable token file (the reason is logged); MC_NOT_SUPPORTED for Redis in a build
 * without hiredis. */
MC_API int mc_metadata_create(const char *conn, mc_metadata **out);

/* mc_metadata_create_opts: mc_metadata_create with explicit options (opts may be NULL
 * for the defaults; borrowed). Same returns. */
MC_API int mc_metadata_create_opts(const char *conn, const mc_metadata_opts *opts,
                                   mc_metadata **out);

/* mc_metadata_destroy: frees the client. NULL is a no-op. No call may be in flight. */
MC_API void mc_metadata_destroy(mc_metadata *md);

/* mc_metadata_kind_of / mc_metadata_is_p2p: the backend kind; true for P2PHANDSHAKE,
 * where the caller must exchange descriptors with peers itself. */
MC_API mc_metadata_kind mc_metadata_kind_of(const mc_metadata *md);
MC_API bool mc_metadata_is_p2p(const mc_metadata *md);

/* mc_metadata_conn_of: the parsed connection string (borrowed, lives as long as md). */
MC_API const mc_metadata_conn *mc_metadata_conn_of(const mc_metadata *md);

/* mc_metadata_prefix: "mooncake/" or "mooncake/<cluster>/" (borrowed, lives as md). */
MC_API const char *mc_metadata_prefix(const mc_metadata *md);

/* mc_metadata_get: reads a raw key (the full key, prefix included).
 *   key: non-empty, at most MC_METADATA_MAX_KEY bytes, borrowed.
 *   value/len: on MC_OK *value is a new malloc'd buffer of *len bytes plus a NUL
 *   terminator (not counted); the caller frees it with free(). Untouched on error.
 * Returns MC_OK; MC_OBJECT_NOT_FOUND (absent; HTTP 404; always for P2P);
 * MC_INVALID_PARAMS (bad key; HTTP 400); MC_BUFFER_OVERFLOW (value larger than
 * max_value_bytes); MC_RPC_TIMEOUT (timed out); MC_RPC_FAIL (cannot connect, or any
 * other HTTP status). */
MC_API int mc_metadata_get(mc_metadata *md, const char *key, char **value, size_t *len);

/* mc_metadata_put: writes a raw key. value: len bytes, borrowed (len may be 0).
 * Returns MC_OK (P2P: nothing is sent); MC_OBJECT_ALREADY_EXISTS (the server refused to
 * overwrite a write-once rpc_meta key with a different value: HTTP 400 "Duplicate...");
 * MC_INVALID_PARAMS (bad key, other HTTP 400; HTTP 404: the URL is not a metadata
 * endpoint, e.g. it lacks the /metadata path, logged naming the URL); MC_BUFFER_OVERFLOW
 * (len > max_value_bytes, or HTTP 413); MC_RPC_TIMEOUT; MC_RPC_FAIL (cannot connect,
 * logged naming the URL). */
MC_API int mc_metadata_put(mc_metadata *md, const char *key, const void *value, size_t len);

/* mc_metadata_delete: removes a raw key.
 * Returns MC_OK (P2P: nothing is sent); MC_OBJECT_NOT_FOUND (absent; HTTP 404);
 * MC_INVALID_PARAMS; MC_RPC_TIMEOUT; MC_RPC_FAIL. */
MC_API int mc_metadata_delete(mc_metadata *md, const char *key);

/* The same codes from etcd and Redis (failures are logged naming the endpoint):
 *   etcd (>= 3.4, plain HTTP: no TLS, no etcd auth; upstream's USE_ETCD builds speak
 *   gRPC to the same keys): every call is one POST of JSON to an endpoint's v3 gateway
 *   (/v3/kv/range, /v3/kv/put, /v3/kv/deleterange, /v3/kv/txn; keys and values
 *   base64), within timeout_ms (connect: connect_timeout_ms). It starts at the endpoint that answered
 *   last and moves to the next one on a connection error, a timeout or an HTTP status
 *   other than 200 and 4xx (5xx: no leader, stopping...), so a call with every endpoint
 *   silent takes up to n_endpoints x timeout_ms. A range without kvs, or deleterange
 *   with deleted 0: MC_OBJECT_NOT_FOUND; "request is too large" (etcd's
 *   --max-request-bytes, 1.5 MiB by default): MC_BUFFER_OVERFLOW; another 4xx:
 *   MC_INVALID_PARAMS; no endpoint answering: MC_RPC_TIMEOUT when the last attempt timed
 *   out, else MC_RPC_FAIL (the message lists every endpoint and its error).
 *   Redis: GET / SET / DEL over one connection per client (calls serialise on it), with
 *   timeout_ms per command; a connection error drops the connection, and when that
 *   connection was opened before this call (a restarted server) the command is
 *   repeated once on a new one (AUTH, SELECT again); never after a timeout. Nil: MC_OBJECT_NOT_FOUND; DEL of 0 keys:
 *   MC_OBJECT_NOT_FOUND; an error reply NOAUTH/WRONGPASS/NOPERM, or AUTH/SELECT refused:
 *   MC_INVALID_PARAMS; another error reply or a lost connection: MC_RPC_FAIL; timed
 *   out: MC_RPC_TIMEOUT.
 *   Both keep the HTTP server's write-once rule for keys containing "rpc_meta": the put
 *   succeeds when the key is absent (etcd: txn comparing version == 0; Redis: SET NX)
 *   or holds the same bytes ("unchanged"), and returns MC_OBJECT_ALREADY_EXISTS when it
 *   holds other bytes. A retried put whose first attempt did land is thus still MC_OK;
 *   a retried delete whose first attempt landed returns MC_OBJECT_NOT_FOUND. */

/* ---------------------------------------------------------------------------------- */
/* 3. Keys, segment descriptors, rpc_meta                                              */
/* ---------------------------------------------------------------------------------- */

/* mc_metadata_key_prefix: "mooncake/" + cluster_id (+ "/" unless it already ends in one),
 * as upstream `TransferMetadata` builds common_key_prefix_. cluster_id: NULL = env
 * MC_METADATA_CLUSTER_ID; NULL or "" = no cluster part. Returns a new malloc'd string. */
MC_API char *mc_metadata_key_prefix(const char *cluster_id);

/* mc_metadata_segment_key: the key of a segment descriptor, upstream getFullMetadataKey:
 * prefix + "ram/" + segment, or prefix + segment when the name already holds a '/'.
 * segment: non-empty. cluster_id as above. Returns a new malloc'd string, or NULL when
 * segment is NULL/empty or the key would exceed MC_METADATA_MAX_KEY bytes. */
MC_API char *mc_metadata_segment_key(const char *cluster_id, const char *segment);

/* mc_metadata_rpc_meta_key: prefix + "rpc_meta/" + server (upstream rpc_meta_prefix_).
 * Same arguments, returns and NULL cases as mc_metadata_segment_key. */
MC_API char *mc_metadata_rpc_meta_key(const char *cluster_id, const char *server);

/* Decoding limits (checked before anything is kept). */
#define MC_SEGMENT_MAX_JSON (16u << 20) /* bytes of one encoded descriptor */
#define MC_SEGMENT_MAX_BUFFERS 65536    /* buffers[] entries */
#define MC_SEGMENT_MAX_NAME 4096        /* bytes of a segment or buffer name */
#define MC_SEGMENT_MAX_HOST_ID 256      /* bytes of host_id */
#define MC_SEGMENT_MAX_SHM_SOCKET 107   /* bytes of shm_socket (sun_path less the NUL) */
#define MC_SEGMENT_MAX_ADDR INT64_MAX   /* addr, length and addr+length (JSON integers) */

/* One registered buffer. addr/length: bytes in the owner's address space. */
typedef struct mc_buffer_desc {
    char *name;      /* owned by the descriptor; upstream sets the segment name here */
    uint64_t addr;   /* > 0 */
    uint64_t length; /* > 0, addr + length <= MC_SEGMENT_MAX_ADDR */
    bool shm;        /* mooncake-c: backed by a memfd the owner shares over shm_socket */
} mc_buffer_desc;

/* A segment descriptor (`mooncake/ram/<name>`). Strings are owned (malloc'd) and freed
 * by mc_segment_desc_deinit; NULL string fields encode as absent (name, protocol) or "".
 * Not thread-safe: one owner at a time. */
typedef struct mc_segment_desc {
    char *name;                 /* segment name (the engine's local_server_name) */
    char *protocol;             /* "tcp" (other strings decode; only tcp is served) */
    uint16_t tcp_data_port;     /* 0 when the peer published none */
    int tcp_proto_version;      /* 1 or 2; upstream's default 1 when absent */
    char *timestamp;            /* free text, upstream "YYYY-mm-dd HH:MM:SS.uuuuuu" */
    char *host_id;              /* mooncake-c: mc_metadata_host_id() of the owner */
    char *shm_socket;           /* mooncake-c: Unix socket serving memfds; "" = none */
    size_t n_buffers;           /* <= MC_SEGMENT_MAX_BUFFERS */
    mc_buffer_desc *buffers;    /* n_buffers entries, owned */
} mc_segment_desc;

/* mc_segment_desc_init: zeroes desc (tcp_proto_version = 2, protocol unset). */
MC_API void mc_segment_desc_init(mc_segment_desc *desc);

/* mc_segment_desc_deinit: frees every string and the buffer array, then re-inits. */
MC_API void mc_segment_desc_deinit(mc_segment_desc *desc);

/* mc_segment_desc_set: replaces one owned string field with a copy of value (NULL
 * clears). field points into desc (e.g. &desc->host_id). Returns MC_OK. */
MC_API int mc_segment_desc_set(char **field, const char *value);

/* mc_segment_desc_add_buffer: appends a copy of {name, addr, length, shm}.
 * Returns MC_OK; MC_INVALID_PARAMS when name is NULL/empty/longer than MAX_NAME, addr or
 * length is 0, or addr + length exceeds MC_SEGMENT_MAX_ADDR; MC_BUFFER_OVERFLOW when
 * the descriptor already holds MC_SEGMENT_MAX_BUFFERS. */
MC_API int mc_segment_desc_add_buffer(mc_segment_desc *desc, const char *name, uint64_t addr,
                                      uint64_t length, bool shm);

/* mc_segment_desc_remove_buffer: removes the first buffer starting at addr.
 * Returns MC_OK or MC_OBJECT_NOT_FOUND. */
MC_API int mc_segment_desc_remove_buffer(mc_segment_desc *desc, uint64_t addr);

/* mc_segment_desc_encode: the upstream TCP JSON (`encodeSegmentDesc`): name, protocol,
 * tcp_data_port, tcp_proto_version, timestamp (desc->timestamp, or the current local
 * time when NULL/empty), buffers[{name, addr, length}], plus host_id and shm_socket when
 * set and "shm": true on shared buffers.
 *   json/len: on MC_OK a new malloc'd NUL-terminated string; the caller frees it.
 * Returns MC_OK; MC_INVALID_PARAMS when name or protocol is missing or a field breaks a
 * decoding limit (so everything encoded decodes). */
MC_API int mc_segment_desc_encode(const mc_segment_desc *desc, char **json, size_t *len);

/* mc_segment_desc_decode: parses and validates a descriptor (from a peer: untrusted).
 *   json/len: len bytes (no NUL needed), borrowed; len <= MC_SEGMENT_MAX_JSON.
 *   out: caller's storage, overwritten (not deinit'ed first); filled only on MC_OK, and
 *   then owns new strings. On error out is left init'ed (nothing to free).
 *   err/errlen: optional; receives a one-line reason naming the field on error.
 * Strict rules: the top level is an object; name: non-empty string; protocol: string;
 * tcp_data_port: integer 0..65535 (absent = 0); tcp_proto_version: integer 1..255
 * (absent = 1); timestamp, host_id, shm_socket: strings within their limits (absent =
 * NULL); buffers: array (absent = none) of at most MC_SEGMENT_MAX_BUFFERS objects with
 * name (non-empty string), addr and length (integers > 0, addr + length <=
 * MC_SEGMENT_MAX_ADDR) and optional shm (bool). Unknown fields (RDMA devices, rkey, ...)
 * are ignored. Duplicate object keys, NUL bytes and invalid UTF-8 are rejected.
 * Returns MC_OK, MC_DESERIALIZE_FAIL (malformed), MC_BUFFER_OVERFLOW (too large). */
MC_API int mc_segment_desc_decode(const char *json, size_t len, mc_segment_desc *out,
                                  char *err, size_t errlen);

/* The rpc_meta value: where a server's handshake/RPC port listens. */
typedef struct mc_rpc_meta {
    char ip_or_host_name[MC_METADATA_MAX_HOST]; /* non-empty */
    uint16_t rpc_port;                          /* 1..65535 */
} mc_rpc_meta;

/* mc_rpc_meta_encode: `{"ip_or_host_name": "...", "rpc_port": N}` (upstream
 * addRpcMetaEntry). json/len: new malloc'd string on MC_OK. Returns MC_OK or
 * MC_INVALID_PARAMS (empty host, port 0). */
MC_API int mc_rpc_meta_encode(const mc_rpc_meta *meta, char **json, size_t *len);

/* mc_rpc_meta_decode: strict inverse (object; ip_or_host_name: non-empty string shorter
 * than MC_METADATA_MAX_HOST; rpc_port: integer 1..65535; other fields ignored).
 * Returns MC_OK or MC_DESERIALIZE_FAIL (err filled when given). */
MC_API int mc_rpc_meta_decode(const char *json, size_t len, mc_rpc_meta *out, char *err,
                              size_t errlen);

/* mc_metadata_host_id: a string naming this boot of this host: "<machine-id>-<boot-id>"
 * from /etc/machine-id and /proc/sys/kernel/random/boot_id (the host name stands in
 * for a missing file). Two processes that see the same value share a kernel and can
 * pass memfds. buf: at least MC_SEGMENT_MAX_HOST_ID bytes. Returns MC_OK or
 * MC_BUFFER_OVERFLOW (buf too small; buf then holds ""). */
MC_API int mc_metadata_host_id(char *buf, size_t buflen);

/* Typed helpers over a client (keys built with the client's prefix). For P2P clients:
 * put_* and remove_* return MC_OK without doing anything, get_segment returns
 * MC_OBJECT_NOT_FOUND, and get_rpc_meta splits the server name "host:port" as upstream
 * getRpcMetaEntry does (MC_INVALID_PARAMS when it is not host:port).
 * Returns as mc_metadata_get/put/delete, plus MC_INVALID_PARAMS for an empty or too long
 * name or a desc that does not encode, and MC_DESERIALIZE_FAIL for a stored value that
 * does not decode. `out` follows the decode functions' rules. */
MC_API int mc_metadata_put_segment(mc_metadata *md, const mc_segment_desc *desc);
MC_API int mc_metadata_get_segment(mc_metadata *md, const char *segment, mc_segment_desc *out);
MC_API int mc_metadata_remove_segment(mc_metadata *md, const char *segment);
MC_API int mc_metadata_put_rpc_meta(mc_metadata *md, const char *server,
                                    const mc_rpc_meta *meta);
MC_API int mc_metadata_get_rpc_meta(mc_metadata *md, const char *server, mc_rpc_meta *out);
MC_API int mc_metadata_remove_rpc_meta(mc_metadata *md, const char *server);

/* ---------------------------------------------------------------------------------- */
/* 4. HTTP metadata server                                                             */
/* ---------------------------------------------------------------------------------- */

typedef struct mc_http_metadata_server mc_http_metadata_server; /* opaque */

#define MC_HTTP_METADATA_DEFAULT_MAX_BODY (16u << 20)   /* bytes */
#define MC_HTTP_METADATA_DEFAULT_MAX_TOTAL (256ull << 20) /* bytes of keys + values */
#define MC_HTTP_METADATA_DEFAULT_MAX_KEYS 100000u       /* keys stored */
#define MC_HTTP_METADATA_DEFAULT_MAX_CONNECTIONS 1024u
#define MC_HTTP_METADATA_DEFAULT_MAX_PER_IP 128u        /* connections from one address */
#define MC_HTTP_METADATA_DEFAULT_HEADER_TIMEOUT_MS 10000u
#define MC_HTTP_METADATA_DEFAULT_REQUEST_TIMEOUT_MS 60000u
#define MC_HTTP_METADATA_DEFAULT_MAX_PENDING_BODY (256ull << 20) /* bytes, all connections */

/* Every limit: 0 = its default. docs/security.md explains each. */
typedef struct mc_http_metadata_server_opts {
    uint64_t max_body_bytes;  /* larger PUT bodies get 413; 0 = DEFAULT_MAX_BODY */
    uint64_t max_total_bytes; /* keys + values stored; beyond: 507; 0 = DEFAULT_MAX_TOTAL */
    unsigned threads;         /* worker threads; 0 = 2 */
    unsigned max_connections; /* concurrent connections; 0 = 1024 */
    unsigned idle_timeout_s;  /* an idle connection is closed after this; 0 = 30 */
    /* issue 11 (docs/security.md): */
    uint64_t max_keys;                /* keys stored; beyond: 507; 0 = DEFAULT_MAX_KEYS */
    unsigned max_connections_per_ip;  /* 0 = DEFAULT_MAX_PER_IP */
    unsigned header_timeout_ms;       /* request line + headers in, from accept or the end
                                         of the previous request; 0 = DEFAULT */
    unsigned request_timeout_ms;      /* whole request + response; 0 = DEFAULT */
    uint64_t max_pending_body_bytes;  /* PUT bodies held at once, all connections; beyond:
                                         503; 0 = DEFAULT_MAX_PENDING_BODY */
    const struct mc_auth_secret *auth; /* the cluster secret (borrowed; must outlive the
                                         server); NULL or empty: open (a warning at start).
                                         With one, /metadata needs a signed request
                                         (src/net/httpd.h); /health and /metrics do not */
} mc_http_metadata_server_opts;

/* mc_http_metadata_server_start: binds host:port and serves in background threads.
 *   host: an IPv4 or IPv6 address literal or a resolvable name ("0.0.0.0", "127.0.0.1",
 *   "::"); NULL = "0.0.0.0". port: 0 picks a free port (read it back with _port).
 *   opts: NULL = defaults; borrowed.
 *   Routes (upstream master-embedded server, §7; API.md §4):
 *     GET|PUT|DELETE /metadata?key=K (K percent-decoded, '+' is a space; not stripped):
 *       missing, empty or all-blank key, a NUL in it, or more than MC_METADATA_MAX_KEY
 *       bytes -> 400 "Missing key parameter" (or "metadata key too long");
 *       GET -> 200 stored body (Content-Type application/json) | 404 "metadata not found";
 *       PUT -> 200 "metadata updated"; a key containing "rpc_meta" that exists: same body
 *         -> 200 "metadata unchanged", other body -> 400 "Duplicate rpc_meta key not
 *         allowed"; body over max_body_bytes -> 413 (nothing stored); store full -> 507;
 *       DELETE -> 200 "metadata deleted" | 404 "metadata not found";
 *       other methods -> 405 "Method not allowed". A PUT of a new key beyond max_keys ->
 *       507 "metadata store full" too. With a secret, an unsigned, badly signed, stale or
 *       replayed request -> 401 before anything is read or stored (src/net/httpd.h).
 *     GET /health -> 200 "OK". GET /metrics -> Prometheus text: http_metadata_keys,
 *     http_metadata_bytes, their limits, and the HTTP server's connection and refusal
 *     counters (http_metadata_refused_total{reason=...}). Any other path -> 404.
 *   out: receives the running server; stop and free it with _destroy.
 * Returns 0; -EINVAL (empty host, bad opts); -ENOENT (host is not an address and does
 * not resolve); -EADDRINUSE (port taken); -EACCES (port
 * needs privileges); other -errno from socket/bind/listen or the server library. A bind
 * or listen failure is not logged (the caller reports it, naming its flag and the
 * address); a name that does not resolve is logged with the resolver's reason, a failure
 * of the server library after binding with host:port and the reason. */
MC_API int mc_http_metadata_server_start(const char *host, uint16_t port,
                                         const mc_http_metadata_server_opts *opts,
                                         mc_http_metadata_server **out);

/* mc_http_metadata_server_port: the bound port (the real one when started with 0). */
MC_API uint16_t mc_http_metadata_server_port(const mc_http_metadata_server *srv);

/* mc_http_metadata_server_count: number of keys stored now. */
MC_API size_t mc_http_metadata_server_count(mc_http_metadata_server *srv);

/* mc_http_metadata_server_metrics_text: the /metrics body (see above). Returns a new
 * malloc'd NUL-terminated string; *len (may be NULL) gets its length. Thread-safe. */
MC_API char *mc_http_metadata_server_metrics_text(mc_http_metadata_server *srv, size_t *len);

/* mc_http_metadata_server_remove: deletes a key locally (for the master's cleanup of
 * dead clients). Returns MC_OK or MC_OBJECT_NOT_FOUND. */
MC_API int mc_http_metadata_server_remove(mc_http_metadata_server *srv, const char *key);

/* mc_http_metadata_server_stop: stops listening and serving; waits for the worker
 * threads (requests in progress finish). Idempotent. The store stays readable through
 * _count until _destroy. Must not be called from a request handler. */
MC_API void mc_http_metadata_server_stop(mc_http_metadata_server *srv);

/* mc_http_metadata_server_destroy: stops (if running) and frees. NULL is a no-op. */
MC_API void mc_http_metadata_server_destroy(mc_http_metadata_server *srv);

#endif
