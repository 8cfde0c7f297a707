/* replicate.c: HA replication of the mutation log (replicate.h; docs/ha.md "Replication
 * to the standbys").
 *
 * Channel: a direct pull, standby -> leader, over the master RPC port (FETCH_LOG); etcd
 * (or Redis) only elects. The leader keeps the frames its log writer produced in a ring
 * (REPL_RING_MAX bytes; older frames are dropped whole); a standby asks for the frames
 * from its next LSN, applies them in order and asks again (at once when it got some,
 * after REPL_IDLE_MS when it was up to date). Its request's from_lsn - 1 is its
 * acknowledgement: the leader's sync mode waits on that.
 *
 * Bootstrap (docs/ha.md "Bootstrap from a snapshot"): a standby whose next LSN the
 * ring no longer holds (it starts late, or fell behind) gets OBJECT_NOT_FOUND and asks
 * FETCH_SNAPSHOT instead: the leader builds a snapshot of its index (snapshot.c's
 * format, at L = the last LSN given out) on a thread of its own, into memory, and
 * serves it in chunks of at most 4 MiB; the standby replaces its index with it and
 * continues with FETCH_LOG from L + 1 (the copy is fuzzy; the records after L make it
 * exact, as for a restore).
 *
 * Who may fetch (docs/ha.md "Who may fetch"): a fetch must carry the term token the
 * leader published with its lease in the election backend; anything else is refused
 * (ILLEGAL_CLIENT), counted, and acknowledges nothing.
 *
 * No upstream counterpart in this form: upstream's op log travels through etcd in
 * batches (upstream-mooncake.md §4.8). */
#include "master/replicate.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/env.h"
#include "common/sync.h"
#include "common/xalloc.h"
#include "master.pb-c.h"
#include "master/oplog_internal.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "mooncake/status.h"
#include "net/frame.h"
#include "net/sock.h"
#include "rpc/master_rpcs.h"

#undef TAG
#define TAG "ha-repl"

#define REPL_RING_MAX (256u << 20) /* frames kept for standbys, bytes               */
#define REPL_FETCH_MAX (4u << 20)  /* frames in one FETCH_LOG reply, at most          */
#define REPL_IDLE_MS 5             /* a standby that is up to date asks again after   */
#define REPL_SYNC_WAIT_MS 1000     /* sync: a put waits this long for a standby       */
#define REPL_GONE_MS 2000          /* sync: no fetch for this long = no standby       */
#define REPL_CONNS 8               /* follower connections (>= the leader's RPC loops) */
#define REPL_STUCK_MS 20           /* a reply later than this: try the next connection */
#define REPL_SNAP_KEEP_MS 30000    /* a snapshot nobody read for this long is freed      */
#define REPL_SNAP_WAIT_MS 20       /* a standby asks again this often while one is built */
#define REPL_TOKEN_MAX 64          /* bytes of a term token, with the NUL                */

struct mc__repl {
    mc_master_service *svc;
    mc_master_ha_sync mode;
    uint32_t ttl_s;
    const mc_auth_secret *auth; /* the cluster secret for the fetch connections (or NULL) */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* acked moved, frames appended, stop */
    /* the ring (mu): frames with LSNs first..last, contiguous */
    mc__buf ring;
    uint64_t first, last;
    uint64_t base;              /* first LSN this master logged itself                */
    size_t hint_off;            /* a frame boundary in ring and its LSN (fetch)       */
    uint64_t hint_lsn;
    uint64_t acked;             /* the highest LSN a standby acknowledged              */
    uint64_t last_fetch_ms;     /* monotonic, 0: never                                 */
    bool degraded;              /* sync: acknowledging without a standby (logged once) */
    /* the follower (standby) */
    char leader[256];           /* mu */
    int64_t view;               /* mu: the view of `leader`                            */
    bool running, fstop;        /* mu: the follower runs / is asked to stop     */
    pthread_t thr;
    int wake_fd;                /* eventfd: written when the follower is asked to stop, */
                                /* so a wait for a stopped leader's reply ends at once  */
    uint64_t applied;           /* the last LSN applied (follower thread; mu to read)  */
    int64_t applied_view;       /* the view of the leader the last record came from    */
    const char *broken;         /* why this copy cannot be trusted (NULL: fine)        */
    bool behind;                /* mu: the leader's ring lost records this copy lacks  */
                                /* and no bootstrap has succeeded since                */
    /* the follower's connections to `leader` (REPL_CONNS, spread over its RPC loops by
     * its round robin: a fetch stuck behind a put waiting on one loop goes through
     * another); pend: a request sent whose reply was not read yet (its id) */
    int fd[REPL_CONNS];
    uint64_t pend[REPL_CONNS];
    unsigned cur;
    uint64_t next_id;
    char fd_leader[256];
    mc__oplog *log;             /* opened at promotion                                 */
    uint64_t fetches, records_applied, sync_waits, sync_degraded;
    size_t ring_max;            /* REPL_RING_MAX or MC_HA_REPL_RING_BYTES              */
    /* who may fetch (mu): the leader's term token; a standby's copy of it, and whether
     * the leader refused it since the HA thread last looked */
    char token[REPL_TOKEN_MAX];
    bool token_refused;
    uint64_t refused;
    /* leader: the snapshot standbys bootstrap from (smu) */
    pthread_mutex_t smu;
    bool snap_building, snap_joinable;
    pthread_t snap_thr;
    uint8_t *snap;
    size_t snap_len;
    uint64_t snap_id, snap_lsn, snap_used_ms, snapshots_built;
    uint64_t snapshots_loaded;  /* standby: bootstraps done (mu to read)               */
};

mc__repl *mc__repl_create(mc_master_service *svc, mc_master_ha_sync mode, uint32_t ttl_s,
                          const mc_auth_secret *auth)
{
    uint64_t ring = REPL_RING_MAX;
    if (mc_env_size("MC_HA_REPL_RING_BYTES", REPL_RING_MAX, 4096, 64ull << 30, &ring) != 0)
        return NULL;
    mc__repl *r = mc_xcalloc(1, sizeof *r);
    r->ring_max = (size_t)ring;
    r->svc = svc;
    r->mode = mode;
    r->ttl_s = ttl_s;
    r->auth = auth;
    r->first = 1;
    r->base = 1;
    r->hint_lsn = 1;
    for (unsigned i = 0; i < REPL_CONNS; i++)
        r->fd[i] = -1;
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd < 0) {
        mc_log(MC_LOG_ERROR, TAG, "eventfd: %s", strerror(errno));
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->smu, NULL);
    mc_cond_init_monotonic(&r->cond);
    svc->repl = r;
    return r;
}

/* ---- the ring (leader) ---- */

static uint32_t frame_len(const uint8_t *p)
{
    return MC_MASTER_LOG_HDR + mc_get_le32(p);
}

static uint64_t frame_lsn(const uint8_t *p)
{
    return mc_get_le64(p + 8);
}

/* Drops old frames until the ring is at most half of its size (mu held). */
static void ring_trim(mc__repl *r)
{
    size_t off = 0;
    while (r->ring.len - off > r->ring_max / 2 && off < r->ring.len)
        off += frame_len(r->ring.p + off);
    if (off >= r->ring.len) {
        r->ring.len = 0;
        r->first = r->last + 1;
    } else {
        r->first = frame_lsn(r->ring.p + off);
        memmove(r->ring.p, r->ring.p + off, r->ring.len - off);
        r->ring.len -= off;
    }
    r->hint_off = 0;
    r->hint_lsn = r->first;
}

static void ring_add(mc__repl *r, const uint8_t *frames, size_t len, uint64_t last)
{
    if (!len)
        return;
    if (r->ring.len == 0)
        r->first = frame_lsn(frames), r->hint_off = 0, r->hint_lsn = r->first;
    memcpy(mc__buf_room(&r->ring, len), frames, len);
    r->ring.len += len;
    r->last = last;
    if (r->ring.len > r->ring_max)
        ring_trim(r);
}

void mc__repl_append(mc__repl *r, const uint8_t *frames, size_t len, uint64_t last)
{
    pthread_mutex_lock(&r->mu);
    ring_add(r, frames, len, last);
    pthread_mutex_unlock(&r->mu);
}

/* Whether token is this term's (mu held). A leader that has none refuses everyone. */
static bool token_ok_locked(mc__repl *r, const char *token)
{
    size_t n = strlen(r->token);
    if (!n || !token || strlen(token) != n)
        return false;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(r->token[i] ^ token[i]);
    return d == 0;
}

/* Refuses a fetch without the term token (mu held): counted, logged once a minute. */
static int refuse_locked(mc__repl *r, const char *what)
{
    static uint64_t last_log_ms;
    r->refused++;
    uint64_t now = mc_now_ms();
    if (!last_log_ms || now - last_log_ms > 60000) {
        last_log_ms = now;
        mc_log(MC_LOG_WARN, TAG, "refused a %s without this term's token: only the standbys "
               "that read it from the election backend may fetch (docs/ha.md \"Who may "
               "fetch\"; counted in master_rpc_refused_total{reason=\"fetch_not_standby\"})",
               what);
    }
    return MC_ILLEGAL_CLIENT;
}

static void snap_expire(mc__repl *r, uint64_t now);

int mc_master_service_fetch_log(mc_master_service *svc, const char *token, uint64_t from,
                                uint8_t *buf, size_t cap, size_t *len, uint64_t *first,
                                uint64_t *last, uint64_t *base)
{
    mc__repl *r = svc->repl;
    *len = 0;
    *first = *last = *base = 0;
    if (!r || r->mode == MC_MASTER_HA_SYNC_NONE)
        return MC_NOT_SUPPORTED;
    pthread_mutex_lock(&r->mu);
    if (!token_ok_locked(r, token)) {
        int rc = refuse_locked(r, "FETCH_LOG");
        pthread_mutex_unlock(&r->mu);
        return rc;
    }
    if (from == 0) {
        pthread_mutex_unlock(&r->mu);
        return MC_INVALID_PARAMS;
    }
    *first = r->first;
    *last = r->last;
    *base = r->base;
    if (from - 1 > r->acked && from - 1 <= r->last) {
        r->acked = from - 1;
        pthread_cond_broadcast(&r->cond);
    }
    r->last_fetch_ms = mc_now_ms();
    r->fetches++;
    int rc = MC_OK;
    if (from < r->first) {
        rc = MC_OBJECT_NOT_FOUND; /* dropped from the ring: this standby must start over */
    } else if (from <= r->last && r->ring.len) {
        size_t off = 0;
        uint64_t lsn = r->first;
        if (r->hint_lsn <= from && r->hint_off < r->ring.len) {
            off = r->hint_off;
            lsn = r->hint_lsn;
        }
        while (lsn < from && off < r->ring.len) {
            off += frame_len(r->ring.p + off);
            lsn++;
        }
        size_t end = off;
        while (end < r->ring.len && end - off + frame_len(r->ring.p + end) <= cap) {
            end += frame_len(r->ring.p + end);
            lsn++;
        }
        memcpy(buf, r->ring.p + off, end - off);
        *len = end - off;
        r->hint_off = end;
        r->hint_lsn = lsn;
    }
    uint64_t now = r->last_fetch_ms;
    pthread_mutex_unlock(&r->mu);
    snap_expire(r, now);
    return rc;
}

/* ---- the bootstrap snapshot (leader) ---- */

/* Frees a snapshot nobody read for REPL_SNAP_KEEP_MS (any thread). */
static void snap_expire(mc__repl *r, uint64_t now)
{
    pthread_mutex_lock(&r->smu);
    if (r->snap && !r->snap_building && now - r->snap_used_ms > REPL_SNAP_KEEP_MS) {
        free(r->snap);
        r->snap = NULL;
        r->snap_len = 0;
    }
    pthread_mutex_unlock(&r->smu);
}

static void *snap_main(void *arg)
{
    mc__repl *r = arg;
    size_t len = 0;
    uint64_t lsn = 0, nobjs = 0, t0 = mc_now_ms();
    uint8_t *p = mc__snapshot_encode(r->svc, r->log, &len, &lsn, &nobjs);
    pthread_mutex_lock(&r->smu);
    free(r->snap);
    r->snap = p;
    r->snap_len = len;
    r->snap_lsn = lsn;
    r->snap_id++;
    r->snap_used_ms = mc_now_ms();
    r->snap_building = false;
    r->snapshots_built++;
    uint64_t id = r->snap_id;
    pthread_mutex_unlock(&r->smu);
    mc_log(MC_LOG_INFO, TAG, "snapshot %llu for a standby's bootstrap: LSN %llu, %llu "
           "object(s), %zu bytes, built in %llu ms", (unsigned long long)id,
           (unsigned long long)lsn, (unsigned long long)nobjs, len,
           (unsigned long long)(mc_now_ms() - t0));
    return NULL;
}

int mc_master_service_fetch_snapshot(mc_master_service *svc, const char *token, uint64_t id,
                                     uint64_t offset, uint8_t *buf, size_t cap,
                                     mc_master_snapshot_chunk *out)
{
    mc__repl *r = svc->repl;
    memset(out, 0, sizeof *out);
    if (!r || r->mode == MC_MASTER_HA_SYNC_NONE || !r->log)
        return MC_NOT_SUPPORTED; /* no replication, or not a leader (no log of its own) */
    pthread_mutex_lock(&r->mu);
    bool ok = token_ok_locked(r, token);
    int rc = ok ? MC_OK : refuse_locked(r, "FETCH_SNAPSHOT");
    uint64_t first = r->first; /* a snapshot at L is usable while the ring holds L + 1 */
    pthread_mutex_unlock(&r->mu);
    if (!ok)
        return rc;
    pthread_mutex_lock(&r->smu);
    if (id == 0) {
        bool usable = r->snap && r->snap_lsn + 1 >= first;
        if (!usable && !r->snap_building) {
            if (r->snap_joinable)
                pthread_join(r->snap_thr, NULL); /* it has finished: building is false */
            r->snap_joinable = false;
            r->snap_building = true;
            if (pthread_create(&r->snap_thr, NULL, snap_main, r) == 0) {
                r->snap_joinable = true;
            } else {
                r->snap_building = false;
                rc = MC_INTERNAL_ERROR;
            }
        }
        if (!usable) {
            pthread_mutex_unlock(&r->smu);
            return rc; /* ready = false: ask again */
        }
        id = r->snap_id;
    }
    if (!r->snap || id != r->snap_id) {
        pthread_mutex_unlock(&r->smu);
        return MC_OBJECT_NOT_FOUND; /* replaced or freed: ask with 0 */
    }
    if (offset > r->snap_len) {
        pthread_mutex_unlock(&r->smu);
        return MC_INVALID_PARAMS;
    }
    size_t n = r->snap_len - offset < cap ? r->snap_len - (size_t)offset : cap;
    memcpy(buf, r->snap + offset, n);
    out->ready = true;
    out->id = r->snap_id;
    out->lsn = r->snap_lsn;
    out->total = r->snap_len;
    out->offset = offset;
    out->len = n;
    r->snap_used_ms = mc_now_ms();
    pthread_mutex_unlock(&r->smu);
    return MC_OK;
}

bool mc__repl_sync(const mc__repl *r)
{
    return r->mode == MC_MASTER_HA_SYNC_SYNC;
}

void mc__repl_wait_acked(mc__repl *r, uint64_t lsn)
{
    if (r->mode != MC_MASTER_HA_SYNC_SYNC)
        return;
    pthread_mutex_lock(&r->mu);
    if (r->acked >= lsn) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    r->sync_waits++;
    uint64_t now = mc_now_ms();
    bool gone = !r->last_fetch_ms || now - r->last_fetch_ms > REPL_GONE_MS;
    if (!gone) {
        struct timespec ts = mc_monotonic_in_ms(REPL_SYNC_WAIT_MS);
        while (r->acked < lsn &&
               pthread_cond_timedwait(&r->cond, &r->mu, &ts) == 0) {
        }
    }
    if (r->acked < lsn) {
        r->sync_degraded++;
        if (!r->degraded)
            mc_log(MC_LOG_WARN, TAG,
                   "--ha_sync=sync: %s; acknowledging puts without a standby's copy until "
                   "one fetches again (counted: master_ha_sync_degraded_total)",
                   gone ? "no standby has fetched the log for 2 s"
                        : "no standby fetched a record within 1 s");
        r->degraded = true;
    } else if (r->degraded) {
        mc_log(MC_LOG_INFO, TAG, "--ha_sync=sync: a standby acknowledges again");
        r->degraded = false;
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- the follower (standby) ---- */

static void close_one(mc__repl *r, unsigned i)
{
    if (r->fd[i] >= 0)
        close(r->fd[i]);
    r->fd[i] = -1;
    r->pend[i] = 0;
}

static void close_fd(mc__repl *r)
{
    for (unsigned i = 0; i < REPL_CONNS; i++)
        close_one(r, i);
}

/* Reads one reply on connection i (its header is due before deadline). Returns MC_OK
 * with *hp and *body (malloc'd), or MC_RPC_FAIL (the connection is closed). */
static int read_reply(mc__repl *r, unsigned i, uint64_t deadline, mc_frame_header *hp,
                      uint8_t **body)
{
    uint8_t hb[MC_FRAME_HEADER_SIZE];
    *body = NULL;
    if (mc_sock_recv_all(r->fd[i], hb, sizeof hb, deadline) != 0 ||
        mc_frame_decode_header(hb, REPL_FETCH_MAX + 4096, hp) != 0) {
        close_one(r, i);
        return MC_RPC_FAIL;
    }
    *body = mc_xmalloc(hp->body_len ? hp->body_len : 1);
    if (hp->body_len && mc_sock_recv_all(r->fd[i], *body, hp->body_len, deadline) != 0) {
        free(*body);
        *body = NULL;
        close_one(r, i);
        return MC_RPC_FAIL;
    }
    r->pend[i] = 0;
    return MC_OK;
}

/* A new connection to the leader's RPC port within deadline, authenticated when the
 * cluster has a secret (the leader's RPC server refuses anything else). fd or -1. */
static int connect_leader(mc__repl *r, const char *leader, uint64_t deadline)
{
    char host[256];
    uint16_t port;
    if (mc_sock_parse_hostport(leader, host, sizeof host, &port, 0) != 0)
        return -1;
    uint64_t left = mc_ms_left(deadline);
    int fd = mc_sock_connect_tcp(host, port, left ? (int)left : 1);
    if (fd < 0 || !mc_auth_enabled(r->auth))
        return fd < 0 ? -1 : fd;
    char err[256];
    int rc = mc_auth_client_fd(fd, r->auth, "master-rpc", deadline, err, sizeof err);
    if (rc != MC_AUTH_OK) {
        mc_log(MC_LOG_WARN, "master-ha", "standby: the leader %s refused the replication "
               "connection: %s (both masters need the same --auth_token_file)", leader, err);
        close(fd);
        return -1;
    }
    return fd;
}

/* A connection to leader with no reply outstanding (connecting, or reading a late reply
 * that has arrived, as needed). Returns its index, or -1 (none now: all are waiting for
 * replies, or the leader refuses connections). */
static int free_conn(mc__repl *r, const char *leader, uint64_t deadline)
{
    if (strcmp(r->fd_leader, leader) != 0) {
        close_fd(r);
        snprintf(r->fd_leader, sizeof r->fd_leader, "%s", leader);
    }
    for (unsigned k = 0; k < REPL_CONNS; k++) {
        unsigned i = (r->cur + k) % REPL_CONNS;
        if (r->fd[i] >= 0 && r->pend[i]) {
            struct pollfd pf = {.fd = r->fd[i], .events = POLLIN};
            if (poll(&pf, 1, 0) <= 0)
                continue; /* still stuck */
            mc_frame_header h;
            uint8_t *b;
            if (read_reply(r, i, deadline, &h, &b) == MC_OK)
                free(b); /* a late reply: its frames are asked again */
        }
        if (r->fd[i] < 0) {
            int fd = connect_leader(r, leader, deadline);
            if (fd < 0)
                return -1;
            r->fd[i] = fd;
        }
        r->cur = i;
        return (int)i;
    }
    /* every connection waits for a late reply: drop the next one and connect afresh
     * (its reply, if it ever comes, is lost with it; the frames are asked again) */
    unsigned i = r->cur % REPL_CONNS;
    close_one(r, i);
    int fd = connect_leader(r, leader, deadline);
    if (fd < 0)
        return -1;
    r->fd[i] = fd;
    return (int)i;
}

/* poll(fd, POLLIN) until ready or deadline, or until the follower is asked to stop. 1
 * ready, -ETIMEDOUT, -ECANCELED (stop asked), -errno. */
static int wait_reply(mc__repl *r, int fd, uint64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = r->wake_fd, .events = POLLIN}};
        uint64_t left = mc_ms_left(deadline);
        int n = poll(p, 2, left > 60000 ? 60000 : (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (p[1].revents)
            return -ECANCELED;
        if (n > 0)
            return 1;
        if (!mc_ms_left(deadline))
            return -ETIMEDOUT;
    }
}

/* One request (opcode op, body[0..blen)) to leader within deadline. Returns MC_OK with
 * *rb (malloc'd reply body, *rlen bytes), or an error (a frame status, e.g.
 * UNAVAILABLE_IN_CURRENT_STATUS from a master that is not the leader). */
static int rpc_once(mc__repl *r, const char *leader, uint16_t op, const uint8_t *body,
                    size_t blen, uint64_t deadline, uint8_t **rb, size_t *rlen)
{
    for (;;) {
        int i = free_conn(r, leader, deadline);
        if (i < 0)
            return MC_RPC_FAIL;
        uint8_t hb[MC_FRAME_HEADER_SIZE];
        uint64_t id = ++r->next_id;
        mc_frame_header h = {.version = MC_FRAME_VERSION, .opcode = op,
                             .body_len = (uint32_t)blen, .request_id = id};
        mc_frame_encode_header(&h, hb);
        if (mc_sock_send_all(r->fd[i], hb, sizeof hb, deadline) != 0 ||
            mc_sock_send_all(r->fd[i], body, blen, deadline) != 0) {
            close_one(r, (unsigned)i);
            return MC_RPC_FAIL;
        }
        r->pend[i] = id;
        /* sync: a reply later than REPL_STUCK_MS: its loop is busy (a put waiting for
         * us?): leave it outstanding and ask on the next connection. async: one
         * connection, wait for the reply */
        uint64_t stuck = r->mode == MC_MASTER_HA_SYNC_SYNC ? mc_now_ms() + REPL_STUCK_MS
                                                           : deadline; /* nobody waits */
        int w = wait_reply(r, r->fd[i], stuck < deadline ? stuck : deadline);
        if (w == -ECANCELED)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS; /* stop asked (a promotion waits) */
        if (w <= 0) {
            if (!mc_ms_left(deadline))
                return MC_RPC_TIMEOUT;
            r->cur = (unsigned)(i + 1) % REPL_CONNS;
            continue;
        }
        if (read_reply(r, (unsigned)i, deadline, &h, rb) != MC_OK)
            return MC_RPC_FAIL;
        if (h.request_id != id) {
            free(*rb);
            close_one(r, (unsigned)i);
            return MC_RPC_FAIL;
        }
        if (h.status != 0) {
            free(*rb);
            return h.status; /* e.g. UNAVAILABLE_IN_CURRENT_STATUS: not the leader */
        }
        *rlen = h.body_len;
        r->cur = (unsigned)i;
        return MC_OK;
    }
}

/* The token to send (a copy: the HA thread may replace it meanwhile). */
static void token_copy(mc__repl *r, char out[REPL_TOKEN_MAX])
{
    pthread_mutex_lock(&r->mu);
    memcpy(out, r->token, REPL_TOKEN_MAX);
    pthread_mutex_unlock(&r->mu);
}

/* A reply status of ILLEGAL_CLIENT: the token is not (any more) the leader's. */
static void note_refused(mc__repl *r, int status)
{
    if (status != MC_ILLEGAL_CLIENT)
        return;
    pthread_mutex_lock(&r->mu);
    r->token_refused = true;
    pthread_mutex_unlock(&r->mu);
}

/* rpc_call: one request req (packed here, at most 256 bytes) with opcode op to leader
 * within deadline, its reply unpacked as reply_desc. Returns MC_OK with *out (free it
 * with protobuf_c_message_free_unpacked), or rpc_once's error, or MC_RPC_FAIL for a
 * reply that does not unpack (the connection is closed). */
static int rpc_call(mc__repl *r, const char *leader, uint16_t op, const ProtobufCMessage *req,
                    uint64_t deadline, const ProtobufCMessageDescriptor *reply_desc,
                    ProtobufCMessage **out)
{
    uint8_t body[256];
    MC_ASSERT(protobuf_c_message_get_packed_size(req) <= sizeof body);
    size_t blen = protobuf_c_message_pack(req, body);
    uint8_t *rb = NULL;
    size_t rlen = 0;
    int rc = rpc_once(r, leader, op, body, blen, deadline, &rb, &rlen);
    if (rc != MC_OK)
        return rc;
    *out = protobuf_c_message_unpack(reply_desc, NULL, rlen, rb);
    free(rb);
    if (!*out) {
        close_fd(r);
        return MC_RPC_FAIL;
    }
    return MC_OK;
}

/* One FETCH_LOG round trip to leader within deadline. Returns MC_OK with *out (free it
 * with mcrpc__fetch_log_reply__free_unpacked), or an error. */
static int fetch_once(mc__repl *r, const char *leader, uint64_t from, uint64_t deadline,
                      Mcrpc__FetchLogReply **out)
{
    char token[REPL_TOKEN_MAX];
    token_copy(r, token);
    Mcrpc__FetchLogRequest req = MCRPC__FETCH_LOG_REQUEST__INIT;
    req.from_lsn = from;
    req.max_bytes = REPL_FETCH_MAX;
    req.term_token = token;
    ProtobufCMessage *msg;
    int rc = rpc_call(r, leader, MC_MASTER_RPC_OPCODE_FETCH_LOG, &req.base, deadline,
                      &mcrpc__fetch_log_reply__descriptor, &msg);
    if (rc != MC_OK)
        return rc;
    *out = (Mcrpc__FetchLogReply *)msg;
    note_refused(r, (*out)->status);
    return MC_OK;
}

/* Waits ms or until the follower is asked to stop. True when it is. */
static bool follower_wait(mc__repl *r, uint64_t ms)
{
    struct timespec ts = mc_monotonic_in_ms(ms);
    pthread_mutex_lock(&r->mu);
    if (!r->fstop)
        pthread_cond_timedwait(&r->cond, &r->mu, &ts);
    bool stop = r->fstop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* The bootstrap: fetches the leader's snapshot (FETCH_SNAPSHOT, in chunks), replaces this
 * standby's index with it and moves applied to its LSN. MC_OK, or an error (transport,
 * refused, stop asked, a snapshot that does not load). */
static int bootstrap(mc__repl *r, const char *leader, int64_t view)
{
    /* building and copying a large index takes a while: a deadline per request, and the
     * whole bootstrap as long as it makes progress */
    mc__buf got = {0};
    uint64_t id = 0, lsn = 0, total = 0;
    int rc = MC_OK;
    uint64_t t0 = mc_now_ms();
    mc_log(MC_LOG_INFO, TAG, "the leader %s no longer holds the records after LSN %llu: "
           "copying its index from a snapshot", leader, (unsigned long long)r->applied);
    for (;;) {
        char token[REPL_TOKEN_MAX];
        token_copy(r, token);
        Mcrpc__FetchSnapshotRequest req = MCRPC__FETCH_SNAPSHOT_REQUEST__INIT;
        req.snapshot_id = id;
        req.offset = got.len;
        req.max_bytes = REPL_FETCH_MAX;
        req.term_token = token;
        ProtobufCMessage *msg;
        rc = rpc_call(r, leader, MC_MASTER_RPC_OPCODE_FETCH_SNAPSHOT, &req.base,
                      mc_now_ms() + 1000u * r->ttl_s, &mcrpc__fetch_snapshot_reply__descriptor,
                      &msg);
        if (rc != MC_OK)
            break;
        Mcrpc__FetchSnapshotReply *fr = (Mcrpc__FetchSnapshotReply *)msg;
        rc = fr->status;
        note_refused(r, rc);
        bool restart = rc == MC_OBJECT_NOT_FOUND ||
                       (rc == MC_OK && fr->ready && (fr->snapshot_id != id && id != 0));
        bool wait = rc == MC_OK && !fr->ready;
        bool done = false;
        if (rc == MC_OK && fr->ready && !restart) {
            if (fr->offset != got.len || fr->total_bytes < got.len + fr->data.len ||
                (fr->data.len == 0 && got.len < fr->total_bytes) ||
                (id != 0 && (fr->total_bytes != total || fr->lsn != lsn))) {
                rc = MC_RPC_FAIL; /* not the chunk asked for */
            } else {
                id = fr->snapshot_id;
                lsn = fr->lsn;
                total = fr->total_bytes;
                memcpy(mc__buf_room(&got, fr->data.len), fr->data.data, fr->data.len);
                got.len += fr->data.len;
                done = got.len == total;
            }
        }
        mcrpc__fetch_snapshot_reply__free_unpacked(fr, NULL);
        if (restart) { /* the leader replaced it: start over */
            id = 0;
            got.len = 0;
            rc = MC_OK;
            continue;
        }
        if (rc != MC_OK || done)
            break;
        if (wait && follower_wait(r, REPL_SNAP_WAIT_MS)) {
            rc = MC_UNAVAILABLE_IN_CURRENT_STATUS; /* asked to stop */
            break;
        }
        pthread_mutex_lock(&r->mu);
        bool stop = r->fstop;
        pthread_mutex_unlock(&r->mu);
        if (stop) {
            rc = MC_UNAVAILABLE_IN_CURRENT_STATUS;
            break;
        }
    }
    if (rc == MC_OK) {
        uint64_t slsn = 0, objs = 0, dropped = 0;
        rc = mc__snapshot_load_live(r->svc, got.p, got.len, &slsn, &objs, &dropped);
        if (rc != MC_OK || slsn != lsn) {
            mc_log(MC_LOG_WARN, TAG, "the snapshot from %s does not load (retrying)", leader);
            rc = MC_RPC_FAIL;
        } else {
            r->applied = lsn; /* follower thread only */
            r->applied_view = view;
            pthread_mutex_lock(&r->mu);
            r->ring.len = 0; /* this copy's ring restarts after the snapshot */
            r->first = lsn + 1;
            r->last = lsn;
            r->hint_off = 0;
            r->hint_lsn = r->first;
            r->snapshots_loaded++;
            pthread_mutex_unlock(&r->mu);
            mc_log(MC_LOG_INFO, TAG, "bootstrapped from %s: snapshot at LSN %llu, %llu "
                   "object(s) (%llu left to the log after it), %zu bytes in %llu ms; "
                   "following its log from LSN %llu", leader, (unsigned long long)lsn,
                   (unsigned long long)objs, (unsigned long long)dropped, got.len,
                   (unsigned long long)(mc_now_ms() - t0), (unsigned long long)lsn + 1);
        }
    }
    free(got.p);
    return rc;
}

typedef struct apply_ctx {
    mc__repl *r;
    int rc;
} apply_ctx;

static int apply_cb(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec)
{
    apply_ctx *a = ctx;
    if (lsn != a->r->applied + 1) {
        a->rc = MC_INVALID_PARAMS;
        return 1;
    }
    int rc = mc_master_log_apply(a->r->svc, lsn, rec);
    if (rc != MC_OK && rc != MC_NO_AVAILABLE_HANDLE)
        mc_log(MC_LOG_WARN, TAG, "record %llu: %s (skipped)", (unsigned long long)lsn,
               mc_strerror(rc));
    a->r->applied = lsn; /* follower thread (or HA thread after it stopped) only */
    a->r->records_applied++;
    return 0;
}

/* The copy is behind (or diverged): until a bootstrap succeeds it may not take over. */
static int resync(mc__repl *r, const char *leader, int64_t view, bool *more)
{
    pthread_mutex_lock(&r->mu);
    r->behind = true;
    pthread_mutex_unlock(&r->mu);
    int rc = bootstrap(r, leader, view);
    if (rc == MC_OK) {
        pthread_mutex_lock(&r->mu);
        r->behind = false;
        pthread_mutex_unlock(&r->mu);
    }
    *more = rc == MC_OK;
    return rc;
}

/* Fetches from leader (view) and applies. Returns MC_OK with *more = whether the leader
 * has more; an error when the round failed (transport) or this copy broke (r->broken). */
static int pull(mc__repl *r, const char *leader, int64_t view, uint64_t deadline, bool *more)
{
    *more = false;
    Mcrpc__FetchLogReply *fr = NULL;
    int rc = fetch_once(r, leader, r->applied + 1, deadline, &fr);
    if (rc != MC_OK)
        return rc;
    if (fr->status == MC_OBJECT_NOT_FOUND) {
        /* behind the leader's ring (a late start, or fell behind): copy its index */
        mcrpc__fetch_log_reply__free_unpacked(fr, NULL);
        return resync(r, leader, view, more);
    } else if (fr->status != MC_OK) {
        rc = fr->status;
    } else if (r->applied && view != r->applied_view && r->applied >= fr->base_lsn) {
        /* it applied records of an older leader that the new leader does not have (it was
         * ahead of the one elected): its copy diverged; copy the new leader's index */
        mc_log(MC_LOG_WARN, TAG, "this standby applied records of an older leader up to LSN "
               "%llu that the new leader %s does not have (its log starts at %llu)",
               (unsigned long long)r->applied, leader, (unsigned long long)fr->base_lsn);
        mcrpc__fetch_log_reply__free_unpacked(fr, NULL);
        return resync(r, leader, view, more);
    } else if (fr->frames.len) {
        apply_ctx a = {r, MC_OK};
        size_t good = 0;
        mc_master_log_stop st = mc_master_log_parse(fr->frames.data, fr->frames.len, apply_cb,
                                                    &a, &good, NULL);
        if (good) {
            pthread_mutex_lock(&r->mu);
            ring_add(r, fr->frames.data, good, r->applied);
            pthread_mutex_unlock(&r->mu);
            r->applied_view = view;
        }
        if (st != MC_MASTER_LOG_END || a.rc != MC_OK)
            r->broken = "the leader sent a frame out of order or corrupt";
        *more = true; /* ask again at once: that request acknowledges these */
    } else if (r->applied < fr->last_lsn && r->applied + 1 >= fr->first_lsn) {
        *more = true;
    }
    mcrpc__fetch_log_reply__free_unpacked(fr, NULL);
    if (r->broken) {
        mc_log(MC_LOG_ERROR, TAG, "standby copy of the index from %s is not usable: %s; this "
               "master will not take over", leader, r->broken);
        return MC_INTERNAL_ERROR;
    }
    return rc;
}

static void *follow_main(void *arg)
{
    mc__repl *r = arg;
    int last_rc = MC_OK;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        if (r->fstop) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        char leader[256];
        snprintf(leader, sizeof leader, "%s", r->leader);
        int64_t view = r->view;
        pthread_mutex_unlock(&r->mu);
        bool more = false;
        uint64_t t0 = mc_now_ms(), a0 = r->applied;
        int rc = pull(r, leader, view, t0 + 1000u * r->ttl_s, &more);
        if (mc_now_ms() - t0 > 500)
            mc_log(MC_LOG_WARN, TAG, "a fetch from %s took %llu ms (%s; LSN %llu -> %llu)",
                   leader, (unsigned long long)(mc_now_ms() - t0), mc_strerror(rc),
                   (unsigned long long)a0, (unsigned long long)r->applied);
        if (r->broken)
            break;
        if (rc != last_rc && rc != MC_OK)
            mc_log(MC_LOG_WARN, TAG, "fetching the log from %s: %s (retrying)", leader,
                   mc_strerror(rc));
        last_rc = rc;
        if (more)
            continue;
        struct timespec ts = mc_monotonic_in_ms(rc == MC_OK ? REPL_IDLE_MS : 100);
        pthread_mutex_lock(&r->mu);
        if (!r->fstop)
            pthread_cond_timedwait(&r->cond, &r->mu, &ts);
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

void mc__repl_follow(mc__repl *r, const char *leader, int64_t view, const char *token)
{
    if (r->mode == MC_MASTER_HA_SYNC_NONE || !leader || !*leader)
        return;
    pthread_mutex_lock(&r->mu);
    snprintf(r->token, sizeof r->token, "%s", token ? token : "");
    snprintf(r->leader, sizeof r->leader, "%s", leader);
    r->view = view;
    bool start = !r->running && !r->fstop;
    if (start)
        r->running = pthread_create(&r->thr, NULL, follow_main, r) == 0;
    pthread_mutex_unlock(&r->mu);
}

bool mc__repl_token_refused(mc__repl *r)
{
    pthread_mutex_lock(&r->mu);
    bool v = r->token_refused;
    r->token_refused = false;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void mc__repl_set_token(mc__repl *r, const char *token)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->token, sizeof r->token, "%s", token ? token : "");
    pthread_mutex_unlock(&r->mu);
}

static void stop_follower(mc__repl *r)
{
    pthread_mutex_lock(&r->mu);
    r->fstop = true;
    pthread_cond_broadcast(&r->cond);
    bool running = r->running;
    r->running = false;
    pthread_mutex_unlock(&r->mu);
    /* a fetch waiting for a leader that stopped answering (SIGSTOP, partition) would
     * hold the promotion for its whole deadline, past the new lease's first renewal */
    uint64_t one = 1;
    if (write(r->wake_fd, &one, sizeof one) < 0) {
        /* EAGAIN only (the counter is full): it is signalled already */
    }
    if (running)
        pthread_join(r->thr, NULL);
    uint64_t v;
    while (read(r->wake_fd, &v, sizeof v) > 0) { /* drained: the promotion's own last */
    }                                            /* fetches wait normally             */
}

int mc__repl_promote(mc__repl *r, int64_t view)
{
    (void)view;
    if (r->mode == MC_MASTER_HA_SYNC_NONE)
        return MC_OK;
    stop_follower(r);
    pthread_mutex_lock(&r->mu);
    char leader[256];
    snprintf(leader, sizeof leader, "%s", r->leader);
    int64_t lview = r->view;
    pthread_mutex_unlock(&r->mu);
    /* the tail the old leader may still serve (a clean stop, a partition that heals);
     * a killed one refuses the connection at once */
    if (*leader && !r->broken) {
        uint64_t deadline = mc_now_ms() + 500;
        bool more = true;
        while (more && mc_ms_left(deadline) && pull(r, leader, lview, deadline, &more) == MC_OK) {
        }
    }
    close_fd(r);
    if (r->broken)
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    if (r->behind) {
        mc_log(MC_LOG_ERROR, TAG, "this standby's copy misses records its leader no longer "
               "holds and no snapshot of the leader was loaded since: it will not take over");
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    if (!r->log) {
        char err[256];
        mc_master_log_sync sync = r->mode == MC_MASTER_HA_SYNC_ASYNC || r->mode ==
                                  MC_MASTER_HA_SYNC_SYNC ? MC_MASTER_LOG_SYNC_WRITE
                                                         : MC_MASTER_LOG_SYNC_NONE;
        r->log = mc__oplog_open(r->svc, NULL, r->applied + 1, sync, err, sizeof err);
        if (!r->log) {
            mc_log(MC_LOG_ERROR, TAG, "cannot start the replication log: %s", err);
            return MC_INTERNAL_ERROR;
        }
        pthread_mutex_lock(&r->mu);
        r->base = r->applied + 1;
        if (!r->ring.len)
            r->first = r->base, r->last = r->applied;
        pthread_mutex_unlock(&r->mu);
        mc__oplog_set_repl(r->log, r);
        /* owners of the copied segments ping the old leader only: from now on they have
         * one client_ttl to reach us (they remount: the segments are pending till then) */
        mc__clients_refresh(r->svc, now_ms(r->svc));
        r->svc->oplog = r->log; /* the gate is still shut: nothing mutates yet */
    }
    mc_log(MC_LOG_INFO, TAG, "promoted with the index copied up to LSN %llu (%llu records "
           "applied from %s)", (unsigned long long)r->applied,
           (unsigned long long)r->records_applied, *leader ? leader : "no leader");
    return MC_OK;
}

void mc__repl_stop(mc__repl *r)
{
    if (!r)
        return;
    stop_follower(r);
    close_fd(r);
}

void mc__repl_free(mc__repl *r)
{
    if (!r)
        return;
    if (r->snap_joinable) /* it reads the log: before the log closes */
        pthread_join(r->snap_thr, NULL);
    if (r->log) {
        r->svc->oplog = NULL;
        mc__oplog_close(r->log);
    }
    r->svc->repl = NULL;
    free(r->snap);
    close(r->wake_fd);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->smu);
    pthread_mutex_destroy(&r->mu);
    free(r->ring.p);
    free(r);
}

void mc__repl_get_stats(mc__repl *r, mc__repl_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    out->applied_lsn = r->applied;
    out->acked_lsn = r->acked;
    out->last_lsn = r->last;
    out->fetches = r->fetches;
    out->records_applied = r->records_applied;
    out->sync_waits = r->sync_waits;
    out->sync_degraded = r->sync_degraded;
    out->refused = r->refused;
    out->snapshots_loaded = r->snapshots_loaded;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->smu);
    out->snapshots_built = r->snapshots_built;
    pthread_mutex_unlock(&r->smu);
}
