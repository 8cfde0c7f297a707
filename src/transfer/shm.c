/* shm.c: the same-host shared-memory path.
 *
 * Owner: a Unix stream socket (abstract namespace, published as `shm_socket`) served on
 * loop 0. Request (16 bytes LE): u32 magic "MCSH", u32 op (1 = map), u64 base. Answer
 * (24 bytes): u32 magic, i32 status (0 / -ENOENT), u64 base, u64 length, with the
 * region's memfd attached (SCM_RIGHTS) on success. Only memfd-backed regions this engine
 * allocated are handed out, looked up by their exact base.
 * Initiator: a peer whose descriptor has our host_id and a shm_socket is "same host".
 * For a request inside one of its shm buffers, the fd is fetched once, mapped once
 * (cached per peer) and the transfer is one copy in the submitting thread (a READ is a
 * memcpy; a WRITE too, or mc_copy_to_segment's streaming stores when the engine was
 * created with mc_te_opts.stream_writes, as the store client's is: common/copy.h).
 * The range is checked against the descriptor and against the mapping. The loop watches
 * the Unix connection: when the owner goes away, mappings are dropped before the next use.
 * With a cluster secret the owner serves only processes of its own uid or of a gid in
 * shm_allowed_gids (SO_PEERCRED, checked at accept before a byte is read), and only
 * after they authenticated (peerauth.c, label "te-shm"); the initiator authenticates
 * right after connecting. No fd is handed out before both checks passed. An owner
 * without a secret answers a handshake with RESULT SERVER_NO_SECRET. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/mc_time.h"
#include "net/frame.h"
#include "net/sock.h"
#include "transfer/internal.h"

#define SHM_MAGIC 0x48534D43u /* "MCSH" */
#define SHM_OP_MAP 1
#define SHM_MAX_CONNS 1024

/* ---- owner side ---- */

static void shm_close(te_shmconn *c)
{
    mc__te_auth_srv_free(c->io, c->auth);
    mc_loop_del(c->io->loop, c->fd);
    close(c->fd);
    mc_list_remove(&c->link);
    free(c);
}

static te_region *shared_region(mc_te *te, uint64_t base)
{
    te_region *hit = NULL;
    pthread_rwlock_rdlock(&te->reg_lock);
    for (size_t i = 0; i < te->n_regs; i++) {
        te_region *r = te->regs[i];
        if (r->base == base && r->kind != TE_REG_USER && r->memfd >= 0) {
            atomic_fetch_add(&r->refs, 1);
            hit = r;
            break;
        }
        if (r->base > base)
            break;
    }
    pthread_rwlock_unlock(&te->reg_lock);
    return hit;
}

static void shm_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)loop;
    (void)fd;
    (void)events;
    te_shmconn *c = arg;
    mc_te *te = c->io->te;
    if (c->auth) { /* not authenticated yet: nothing but the handshake is read */
        int rc = mc__te_auth_srv_io(te, c->auth, c->fd);
        if (rc < 0) {
            shm_close(c);
            return;
        }
        if (rc == 0)
            return;
        mc__te_auth_srv_free(c->io, c->auth);
        c->auth = NULL;
    }
    for (;;) {
        ssize_t k = mc_sock_recv_nb(c->fd, c->in + c->in_len, sizeof c->in - c->in_len);
        if (k == 0)
            return; /* nothing more now */
        if (k < 0) { /* error or EOF */
            shm_close(c);
            return;
        }
        c->in_len += (size_t)k;
        if (c->in_len < sizeof c->in)
            continue;
        c->in_len = 0;
        if (mc_get_le32(c->in) != SHM_MAGIC || mc_get_le32(c->in + 4) != SHM_OP_MAP) {
            if (!te->auth && mc_auth_looks_like_frame(c->in, 4))
                mc__te_auth_answer_open(te, c->fd, "same-host socket");
            shm_close(c);
            return;
        }
        uint64_t base = mc_get_le64(c->in + 8);
        te_region *r = shared_region(te, base);
        uint8_t rep[24];
        mc_put_le32(rep, SHM_MAGIC);
        mc_put_le32(rep + 4, (uint32_t)(r ? 0 : -ENOENT));
        mc_put_le64(rep + 8, r ? r->base : 0);
        mc_put_le64(rep + 16, r ? r->len : 0);
        int rc = r ? mc_sock_send_fds(c->fd, rep, sizeof rep, &r->memfd, 1)
                   : mc_sock_send_fds(c->fd, rep, sizeof rep, NULL, 0);
        mc__te_region_release(r);
        if (rc < 0) {
            shm_close(c);
            return;
        }
    }
}

/* With a secret: the peer runs as our uid or with an allowed gid (SO_PEERCRED). */
static bool peer_allowed(mc_te *te, int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof cr)
        return false;
    if (cr.uid == geteuid())
        return true;
    for (size_t i = 0; i < te->n_shm_gids; i++)
        if (cr.gid == te->shm_gids[i])
            return true;
    atomic_fetch_add(&te->st.peercred, 1);
    if (mc__te_log_limited(te))
        mc_log(MC_LOG_WARN, TE_TAG,
               "same-host socket: refused process %d of uid %u gid %u: only uid %u and the "
               "gids of MC_TE_SHM_ALLOWED_GIDS may map this engine's memory (further "
               "refusals within 10 s are only counted: mc_te_stats.peercred_refused)",
               (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid, (unsigned)geteuid());
    return false;
}

static void shm_accept(mc_loop *loop, int lfd, uint32_t events, void *arg)
{
    (void)events;
    te_io *io = arg;
    for (int i = 0; i < 64; i++) {
        int fd = mc_sock_accept(lfd, true);
        if (fd < 0)
            return;
        if (mc_list_count(&io->shmconns) >= SHM_MAX_CONNS) {
            close(fd);
            continue;
        }
        if (io->te->auth && !peer_allowed(io->te, fd)) {
            close(fd);
            continue;
        }
        te_shmconn *c = mc_xcalloc(1, sizeof *c);
        c->io = io;
        c->fd = fd;
        if (mc_loop_add(loop, fd, EPOLLIN, shm_io, c) < 0) {
            close(fd);
            free(c);
            continue;
        }
        c->auth = mc__te_auth_srv_new(io, TE_AUTH_SHM, "same-host socket");
        mc_list_push_front(&io->shmconns, &c->link);
    }
}

int mc__te_shm_start(mc_te *te)
{
    mc_sock_set_nonblock(te->shm_lfd, true);
    return mc_loop_add(te->io[0].loop, te->shm_lfd, EPOLLIN, shm_accept, &te->io[0]);
}

void mc__te_shm_tick(te_io *io)
{
    if (!io->n_authing)
        return;
    uint64_t now = mc_now_ms();
    te_shmconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->shmconns, te_shmconn, link)
        if (c->auth && mc__te_auth_expired(io->te, c->auth, c->fd, now))
            shm_close(c); /* unlinks c only */
}

void mc__te_shm_close_all(te_io *io)
{
    te_shmconn *c;
    MC_LIST_FOREACH_ENTRY(c, &io->shmconns, te_shmconn, link)
        shm_close(c); /* unlinks c only */
}

/* ---- initiator side ---- */

typedef struct watch_arg {
    te_peer *p;
    int fd;
    bool close_it;
} watch_arg;

static void watch_io(mc_loop *loop, int fd, uint32_t events, void *arg)
{
    (void)events;
    te_peer *p = arg;
    atomic_store(&p->shm_dead, true);
    atomic_fetch_add_explicit(&p->te->st.shm_lost, 1, memory_order_relaxed);
    mc_loop_del(loop, fd);
    p->shm_watched = false;
}

static void watch_task(void *arg)
{
    watch_arg *w = arg;
    te_peer *p = w->p;
    mc_loop *loop = p->io->loop;
    if (w->close_it) {
        if (p->shm_watched && p->shm_watch_fd == w->fd) {
            mc_loop_del(loop, w->fd);
            p->shm_watched = false;
        }
        close(w->fd);
    } else {
        if (p->shm_watched)
            mc_loop_del(loop, p->shm_watch_fd);
        p->shm_watched = mc_loop_add(loop, w->fd, EPOLLRDHUP, watch_io, p) == 0;
        p->shm_watch_fd = w->fd;
    }
    free(w);
}

static void post_watch(te_peer *p, int fd, bool close_it)
{
    watch_arg *w = mc_xmalloc(sizeof *w);
    w->p = p;
    w->fd = fd;
    w->close_it = close_it;
    if (mc_loop_post(p->io->loop, watch_task, w) < 0) {
        if (close_it)
            close(fd);
        free(w);
    }
}

/* Drops the Unix connection and every mapping (waiting for copies in progress).
 * peer->lock held, shm_rw not. */
void mc__te_peer_shm_reset(te_peer *p)
{
    if (p->shm_fd >= 0) {
        post_watch(p, p->shm_fd, true);
        p->shm_fd = -1;
    }
    pthread_rwlock_wrlock(&p->shm_rw);
    for (size_t i = 0; i < p->n_maps; i++) {
        munmap(p->maps[i]->ptr, p->maps[i]->len);
        free(p->maps[i]);
    }
    p->n_maps = 0;
    atomic_store(&p->shm_dead, false);
    pthread_rwlock_unlock(&p->shm_rw);
}

/* Asks the owner for the memfd of the buffer at base and maps it. peer->lock held. */
static te_map *map_buffer(mc_te *te, te_peer *p, uint64_t base, uint64_t desc_len)
{
    if (p->shm_fd < 0) {
        int fd = mc_sock_connect_unix(p->desc.shm_socket, TE_HS_CONNECT_TIMEOUT_MS);
        if (fd < 0)
            return NULL;
        if (te->auth) {
            int a = mc_auth_client_fd(fd, te->auth, TE_AUTH_SHM,
                                      mc_deadline_ms(TE_HS_CONNECT_TIMEOUT_MS), NULL, 0);
            if (a != MC_AUTH_OK) {
                close(fd);
                mc__te_auth_client_log(te, "the same-host socket", p->name, a);
                return NULL; /* TCP then (which authenticates too) */
            }
        }
        p->shm_fd = fd;
        post_watch(p, fd, false);
    }
    uint64_t deadline = mc_deadline_ms(TE_HS_CONNECT_TIMEOUT_MS);
    uint8_t req[16];
    mc_put_le32(req, SHM_MAGIC);
    mc_put_le32(req + 4, SHM_OP_MAP);
    mc_put_le64(req + 8, base);
    if (mc_sock_send_all(p->shm_fd, req, sizeof req, deadline) < 0)
        goto broken;
    uint8_t rep[24];
    size_t got = 0;
    int memfd = -1;
    while (got < sizeof rep) {
        if (mc_sock_wait(p->shm_fd, POLLIN, deadline) < 0)
            goto broken_fd;
        int fds[1], nfds = 0;
        ssize_t k = mc_sock_recv_fds(p->shm_fd, rep + got, sizeof rep - got, fds, 1, &nfds);
        if (nfds) {
            if (memfd >= 0)
                close(memfd);
            memfd = fds[0];
        }
        if (k <= 0)
            goto broken_fd;
        got += (size_t)k;
    }
    int32_t status = (int32_t)mc_get_le32(rep + 4);
    uint64_t rbase = mc_get_le64(rep + 8), rlen = mc_get_le64(rep + 16);
    if (mc_get_le32(rep) != SHM_MAGIC) {
        if (memfd >= 0)
            close(memfd);
        goto broken;
    }
    if (status != 0 || memfd < 0 || rbase != base || rlen < desc_len || rlen == 0 ||
        rlen > (uint64_t)MC_SEGMENT_MAX_ADDR) {
        if (memfd >= 0)
            close(memfd);
        return NULL;
    }
    /* the owner seals its memfds against shrinking; anything else could SIGBUS us */
    struct stat sb;
    int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(memfd, &sb) < 0 ||
        (uint64_t)sb.st_size < rlen) {
        close(memfd);
        return NULL;
    }
    /* MC_TE_PREFAULT: the page tables of the whole mapping are filled now, not one
     * minor fault per 4 KiB on first access (the owner's pages, committed by it or now) */
    void *ptr = mmap(NULL, rlen, PROT_READ | PROT_WRITE,
                     MAP_SHARED | (te->prefault ? MAP_POPULATE : 0), memfd, 0);
    close(memfd);
    if (ptr == MAP_FAILED)
        return NULL;
    te_map *m = mc_xcalloc(1, sizeof *m);
    m->base = rbase;
    m->len = rlen;
    m->ptr = ptr;
    pthread_rwlock_wrlock(&p->shm_rw);
    if (p->n_maps == p->cap_maps) {
        p->cap_maps = p->cap_maps ? p->cap_maps * 2 : 8;
        p->maps = mc_xrealloc(p->maps, p->cap_maps * sizeof *p->maps);
    }
    p->maps[p->n_maps++] = m;
    pthread_rwlock_unlock(&p->shm_rw);
    return m;
broken_fd:
    if (memfd >= 0)
        close(memfd);
broken:
    mc__te_peer_shm_reset(p);
    return NULL;
}

/* The descriptor buffer holding [remote, remote+len), preferring a shared one; shm_rw
 * held. */
static const te_range *find_buf(te_peer *p, uint64_t remote, uint64_t len)
{
    const te_range *hit = NULL;
    for (size_t i = 0; i < p->n_shm_bufs; i++)
        if (mc__te_range_inside(p->shm_bufs[i].addr, p->shm_bufs[i].len, remote, len)) {
            hit = &p->shm_bufs[i];
            if (hit->shm)
                break;
        }
    return hit;
}

static te_map *find_map(te_peer *p, uint64_t base)
{
    for (size_t i = 0; i < p->n_maps; i++)
        if (p->maps[i]->base == base)
            return p->maps[i];
    return NULL;
}

bool mc__te_shm_possible(mc_te *te, te_peer *p)
{
    if (te->force_tcp)
        return false;
    pthread_rwlock_rdlock(&p->shm_rw);
    bool ok = p->shm_ok;
    pthread_rwlock_unlock(&p->shm_rw);
    return ok;
}

int mc__te_shm_try(mc_te *te, te_peer *p, int op, char *local, uint64_t remote, uint64_t len,
                   uint64_t epoch, bool *handled)
{
    *handled = false;
    if (te->force_tcp)
        return 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        /* fast path: shared lock, copy while holding it */
        pthread_rwlock_rdlock(&p->shm_rw);
        if (!p->shm_ok) {
            pthread_rwlock_unlock(&p->shm_rw);
            return 0;
        }
        const te_range *b = find_buf(p, remote, len);
        if (!b || !b->shm) {
            pthread_rwlock_unlock(&p->shm_rw);
            return b ? 0 : 1; /* user memory: TCP; unknown: maybe a newer descriptor */
        }
        te_map *m = atomic_load(&p->shm_dead) ? NULL : find_map(p, b->addr);
        if (m && mc__te_range_inside(m->base, m->len, remote, len)) {
            if (op == MC_TE_OP_WRITE && mc__te_send_fenced(p, epoch)) {
                /* target fence: checked under shm_rw, which the fence takes exclusively */
                pthread_rwlock_unlock(&p->shm_rw);
                atomic_fetch_add(&te->st.stale_sends, 1);
                *handled = true;
                return -ESTALE;
            }
            char *peer_ptr = m->ptr + (remote - m->base);
            if (op == MC_TE_OP_WRITE)
                mc__te_write_copy(te, peer_ptr, local, len);
            else
                memcpy(local, peer_ptr, len);
            pthread_rwlock_unlock(&p->shm_rw);
            atomic_fetch_add_explicit(&te->st.shm, len, memory_order_relaxed);
            *handled = true;
            return 0;
        }
        uint64_t base = b->addr, blen = b->len;
        pthread_rwlock_unlock(&p->shm_rw);
        if (m || attempt)
            return 0; /* the mapping is smaller than the descriptor says: TCP */
        /* slow path: (re)connect and map, one thread at a time */
        pthread_mutex_lock(&p->lock);
        if (atomic_load(&p->shm_dead))
            mc__te_peer_shm_reset(p);
        pthread_rwlock_rdlock(&p->shm_rw);
        bool have = find_map(p, base) != NULL;
        pthread_rwlock_unlock(&p->shm_rw);
        te_map *nm = have ? NULL : map_buffer(te, p, base, blen);
        pthread_mutex_unlock(&p->lock);
        if (!have && !nm)
            return 0; /* fall back to TCP; the owner checks again */
    }
    return 0;
}
