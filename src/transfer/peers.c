/* peers.c: peer segments: the table of peers (handles), fetching and caching their
 * descriptors (metadata backend or P2P handshake), open/close segment, descriptor
 * queries and the probe. Must not touch the data path's connections (tcp_client.c).
 * See include/mooncake/transfer_engine.h. */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sync.h"
#include "common/xalloc.h"
#include "mooncake/log.h"
#include "mooncake/status.h"
#include "net/sock.h"
#include "transfer/internal.h"

/* ---- peers ---- */

te_peer *mc__te_peer_by_handle(mc_te *te, int64_t h)
{
    te_peer *p = NULL;
    pthread_mutex_lock(&te->seg_lock);
    if (h >= 0 && (size_t)h < te->n_peers)
        p = te->peers[h];
    pthread_mutex_unlock(&te->seg_lock);
    return p;
}

static te_peer *peer_get(mc_te *te, const char *name)
{
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->n_peers; i++)
        if (strcmp(te->peers[i]->name, name) == 0) {
            te_peer *p = te->peers[i];
            pthread_mutex_unlock(&te->seg_lock);
            return p;
        }
    if (te->n_peers == te->cap_peers) {
        te->cap_peers = te->cap_peers ? te->cap_peers * 2 : 16;
        te->peers = mc_xrealloc(te->peers, te->cap_peers * sizeof *te->peers);
    }
    te_peer *p = mc_xcalloc(1, sizeof *p);
    p->te = te;
    p->name = mc_xstrdup(name);
    p->handle = (int64_t)te->n_peers;
    p->io = &te->io[te->n_peers % te->nio];
    mc__te_peer_lanes_init(p);
    p->shm_fd = -1;
    pthread_mutex_init(&p->refresh_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    /* writers first: a fence (fence.c) must not starve behind a stream of copies */
    mc_rwlock_init_writer_first(&p->shm_rw);
    atomic_init(&p->fence_min, mc__te_target_min(te, name)); /* fences set before opening */
    mc_segment_desc_init(&p->desc);
    te->peers[te->n_peers++] = p;
    pthread_mutex_unlock(&te->seg_lock);
    return p;
}

/* Fetches the descriptor of `name` and where its handshake port is. */
static int fetch_desc(mc_te *te, const char *name, mc_segment_desc *out, char *host,
                      size_t hostlen)
{
    if (te->p2p) {
        uint16_t port;
        if (mc_sock_parse_hostport(name, host, hostlen, &port, 0) < 0)
            return MC_INVALID_PARAMS;
        json_t *jr = json_pack("{s:s}", "segment_name", name);
        char *req = jr ? json_dumps(jr, JSON_COMPACT) : NULL;
        json_decref(jr);
        if (!req)
            return MC_INVALID_PARAMS; /* not valid UTF-8 */
        char *reply = NULL;
        size_t rlen = 0;
        int rc = mc__te_hs_request(te, host, port, MC_TE_HS_METADATA, req, strlen(req),
                                   MC_SEGMENT_MAX_JSON + 64, TE_HS_CONNECT_TIMEOUT_MS, &reply,
                                   &rlen);
        free(req);
        if (rc < 0) {
            if (rc != -EACCES) /* a refused authentication is logged with its reason */
                mc_log(MC_LOG_WARN, TE_TAG, "segment %s: handshake failed: %s", name,
                       strerror(-rc));
            return rc == -ETIMEDOUT ? MC_RPC_TIMEOUT : MC_SEGMENT_NOT_FOUND;
        }
        char err[160];
        rc = mc_segment_desc_decode(reply, rlen, out, err, sizeof err);
        free(reply);
        if (rc != MC_OK)
            mc_log(MC_LOG_WARN, TE_TAG, "segment %s: bad descriptor: %s", name, err);
        return rc;
    }
    int rc = mc_metadata_get_segment(te->md, name, out);
    if (rc == MC_OBJECT_NOT_FOUND)
        return MC_SEGMENT_NOT_FOUND;
    if (rc != MC_OK)
        return rc;
    mc_rpc_meta meta;
    if (mc_metadata_get_rpc_meta(te->md, name, &meta) == MC_OK) {
        snprintf(host, hostlen, "%s", meta.ip_or_host_name);
    } else {
        uint16_t port;
        if (mc_sock_parse_hostport(name, host, hostlen, &port, 1) < 0)
            snprintf(host, hostlen, "%s", name);
    }
    return MC_OK;
}

int mc__te_peer_refresh(mc_te *te, te_peer *p)
{
    pthread_mutex_lock(&p->refresh_lock);
    mc_segment_desc d;
    mc_segment_desc_init(&d);
    char host[MC_METADATA_MAX_HOST];
    int rc = fetch_desc(te, p->name, &d, host, sizeof host);
    p->last_refresh_ms = mc__te_now_ms(te);
    if (rc != MC_OK) {
        pthread_mutex_unlock(&p->refresh_lock);
        return rc;
    }
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    if (d.tcp_data_port) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        char ports[16];
        snprintf(ports, sizeof ports, "%u", (unsigned)d.tcp_data_port);
        if (getaddrinfo(host, ports, &hints, &res) == 0 && res) {
            memcpy(&sa, res->ai_addr, res->ai_addrlen);
            salen = res->ai_addrlen;
        } else {
            mc_log(MC_LOG_WARN, TE_TAG, "segment %s: cannot resolve %s", p->name, host);
        }
        if (res)
            freeaddrinfo(res);
    }
    bool same_host = d.host_id && d.host_id[0] && strcmp(d.host_id, te->host_id) == 0 &&
                     d.shm_socket && d.shm_socket[0];
    pthread_mutex_lock(&p->lock);
    bool changed = !p->have_desc || p->desc.tcp_data_port != d.tcp_data_port ||
                   strcmp(p->desc.timestamp ? p->desc.timestamp : "",
                          d.timestamp ? d.timestamp : "") != 0 ||
                   strcmp(p->desc.shm_socket ? p->desc.shm_socket : "",
                          d.shm_socket ? d.shm_socket : "") != 0;
    if (changed)
        mc__te_peer_shm_reset(p);
    te_range *bufs = NULL;
    size_t nb = d.n_buffers;
    if (nb)
        bufs = mc_xcalloc(nb, sizeof *bufs);
    for (size_t i = 0; i < nb; i++)
        bufs[i] = (te_range){.addr = d.buffers[i].addr, .len = d.buffers[i].length,
                             .shm = d.buffers[i].shm};
    pthread_rwlock_wrlock(&p->shm_rw);
    free(p->shm_bufs);
    p->shm_bufs = bufs;
    p->n_shm_bufs = nb;
    p->shm_ok = same_host && !te->force_tcp;
    pthread_rwlock_unlock(&p->shm_rw);
    mc_segment_desc_deinit(&p->desc);
    p->desc = d;
    snprintf(p->host, sizeof p->host, "%s", host);
    if (salen)
        memcpy(&p->data_sa, &sa, salen);
    p->data_salen = salen;
    p->same_host = same_host;
    p->have_desc = true;
    p->stale = false;
    p->gen++;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->refresh_lock);
    return MC_OK;
}

bool mc__te_valid_segment_name(const char *name)
{
    return name && *name && strlen(name) <= MC_SEGMENT_MAX_NAME;
}

int mc__te_peer_open(mc_te *te, const char *name, bool force_refresh, te_peer **out)
{
    if (!te || !te->initialized || !mc__te_valid_segment_name(name))
        return MC_INVALID_PARAMS;
    te_peer *p = peer_get(te, name);
    pthread_mutex_lock(&p->lock);
    bool need = force_refresh || !p->have_desc || p->stale;
    pthread_mutex_unlock(&p->lock);
    if (need) {
        int rc = mc__te_peer_refresh(te, p);
        if (rc != MC_OK)
            return rc;
    }
    *out = p;
    return MC_OK;
}

int mc_te_open_segment(mc_te *te, const char *name, mc_te_segment_t *out)
{
    te_peer *p;
    if (!out)
        return MC_INVALID_PARAMS;
    int rc = mc__te_peer_open(te, name, false, &p);
    if (rc == MC_OK)
        *out = p->handle;
    return rc;
}

int mc_te_close_segment(mc_te *te, mc_te_segment_t seg)
{
    if (!te || !mc__te_peer_by_handle(te, seg))
        return MC_INVALID_PARAMS;
    return MC_OK;
}

bool mc_te_segment_is_local(mc_te *te, mc_te_segment_t seg)
{
    te_peer *p = te ? mc__te_peer_by_handle(te, seg) : NULL;
    return p && mc__te_shm_possible(te, p);
}

int mc_te_get_segment_desc(mc_te *te, const char *name, mc_segment_desc *out)
{
    te_peer *p;
    if (!out)
        return MC_INVALID_PARAMS;
    int rc = mc__te_peer_open(te, name, true, &p);
    if (rc != MC_OK)
        return rc;
    mc_segment_desc_init(out);
    pthread_mutex_lock(&p->lock);
    mc_segment_desc *d = &p->desc;
    mc_segment_desc_set(&out->name, d->name);
    mc_segment_desc_set(&out->protocol, d->protocol);
    out->tcp_data_port = d->tcp_data_port;
    out->tcp_proto_version = d->tcp_proto_version;
    mc_segment_desc_set(&out->timestamp, d->timestamp);
    mc_segment_desc_set(&out->host_id, d->host_id);
    mc_segment_desc_set(&out->shm_socket, d->shm_socket);
    for (size_t i = 0; i < d->n_buffers; i++)
        mc_segment_desc_add_buffer(out, d->buffers[i].name, d->buffers[i].addr,
                                   d->buffers[i].length, d->buffers[i].shm);
    pthread_mutex_unlock(&p->lock);
    return MC_OK;
}

int mc_te_get_first_buffer_address(mc_te *te, const char *name, uint64_t *addr)
{
    te_peer *p;
    if (!addr)
        return MC_INVALID_PARAMS;
    int rc = mc__te_peer_open(te, name, true, &p);
    if (rc != MC_OK)
        return rc;
    pthread_mutex_lock(&p->lock);
    *addr = p->desc.n_buffers ? p->desc.buffers[0].addr : 0;
    pthread_mutex_unlock(&p->lock);
    return MC_OK;
}

int mc_te_send_probe(mc_te *te, const char *server)
{
    if (!te || !te->initialized || !mc__te_valid_segment_name(server))
        return MC_INVALID_PARAMS;
    char host[MC_METADATA_MAX_HOST];
    uint16_t port;
    if (te->p2p) {
        if (mc_sock_parse_hostport(server, host, sizeof host, &port, 0) < 0)
            return MC_INVALID_PARAMS;
    } else {
        mc_rpc_meta meta;
        int rc = mc_metadata_get_rpc_meta(te->md, server, &meta);
        if (rc != MC_OK)
            return rc == MC_OBJECT_NOT_FOUND ? MC_RPC_FAIL : rc;
        snprintf(host, sizeof host, "%s", meta.ip_or_host_name);
        port = meta.rpc_port;
    }
    char *reply = NULL;
    size_t rlen = 0;
    int rc = mc__te_hs_request(te, host, port, MC_TE_HS_PROBE, "{}", 2, 4096,
                               TE_HS_CONNECT_TIMEOUT_MS, &reply, &rlen);
    free(reply);
    if (rc == -ETIMEDOUT)
        return MC_RPC_TIMEOUT;
    return rc < 0 ? MC_RPC_FAIL : MC_OK;
}
