/* service.c: the master core's lifecycle and housekeeping: configuration, create and
 * destroy, and the periodic tick that drives deferred frees, client expiry, the release
 * of stale writes, soft-pin sweeps and watermark eviction. It owns no per-key logic
 * (writes.c, reads.c, remove.c) and no space accounting (space.c). Layout and locks:
 * master/internal.h. */
#include "master/internal.h"
#include "common/sync.h"

#include <math.h>

#define SOFT_SWEEP_SHARDS 64 /* shards whose soft lists a tick checks for lapsed pins */

/* ---- config ---- */

void mc_master_config_init(mc_master_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->default_kv_lease_ttl = 10000;
    cfg->default_kv_soft_pin_ttl = 30ull * 60 * 1000;
    cfg->max_kv_soft_pin_ttl = 24ull * 3600 * 1000;
    cfg->allow_evict_soft_pinned_objects = true;
    cfg->eviction_ratio = 0.05;
    cfg->eviction_high_watermark_ratio = 0.90;
    cfg->client_ttl = 10;
    cfg->put_start_discard_timeout_sec = 30;
    cfg->put_start_release_timeout_sec = 600;
    cfg->allocation_strategy = MC_MASTER_STRATEGY_RANDOM;
    cfg->shard_count = 1024;
    cfg->alloc_alignment = 64;
    cfg->sync_eviction = true;
    cfg->promotion_admission_threshold = 2;
    cfg->offload_task_timeout_ms = 30000;
    cfg->max_total_finished_tasks = 10000;
    cfg->max_total_pending_tasks = 10000;
    cfg->max_total_processing_tasks = 10000;
    cfg->pending_task_timeout_ms = 300000;
    cfg->processing_task_timeout_ms = 300000;
}

void mc_master_put_config_init(mc_master_put_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->replica_num = 1;
}

int mc_master_strategy_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "random"))
        return MC_MASTER_STRATEGY_RANDOM;
    if (!strcmp(name, "free_ratio_first"))
        return MC_MASTER_STRATEGY_FREE_RATIO_FIRST;
    return -1;
}

static bool pow2_in(uint64_t v, uint64_t max)
{
    return v >= 1 && v <= max && (v & (v - 1)) == 0;
}

static bool ratio_ok(double r)
{
    return !isnan(r) && r >= 0.0 && r <= 1.0;
}

/* ---- lifecycle ---- */

int mc_master_service_create(const mc_master_config *cfg, mc_master_service **out)
{
    if (!out)
        return MC_INVALID_PARAMS;
    *out = NULL;
    mc_master_config def;
    if (!cfg) {
        mc_master_config_init(&def);
        cfg = &def;
    }
    /* the release timeout must not be shorter than the discard one; the second counts
     * are bounded so the millisecond products below cannot overflow */
    if (!ratio_ok(cfg->eviction_ratio) || !ratio_ok(cfg->eviction_high_watermark_ratio) ||
        !pow2_in(cfg->shard_count, 65536) || !pow2_in(cfg->alloc_alignment, 4096) ||
        cfg->default_kv_soft_pin_ttl > cfg->max_kv_soft_pin_ttl ||
        cfg->put_start_release_timeout_sec < cfg->put_start_discard_timeout_sec ||
        cfg->put_start_release_timeout_sec > UINT64_MAX / 1000 ||
        cfg->client_ttl > UINT64_MAX / 1000 ||
        (cfg->allocation_strategy != MC_MASTER_STRATEGY_RANDOM &&
         cfg->allocation_strategy != MC_MASTER_STRATEGY_FREE_RATIO_FIRST &&
         cfg->allocation_strategy != MC_MASTER_STRATEGY_DEFAULT))
        return MC_INVALID_PARAMS;
    mc_master_service *svc = mc_xcalloc(1, sizeof(*svc));
    svc->cfg = *cfg;
    if (svc->cfg.allocation_strategy == MC_MASTER_STRATEGY_DEFAULT)
        svc->cfg.allocation_strategy = MC_MASTER_STRATEGY_RANDOM;
    svc->lease_ttl = cfg->default_kv_lease_ttl;
    svc->client_ttl_ms = cfg->client_ttl_ms ? cfg->client_ttl_ms : cfg->client_ttl * 1000;
    svc->discard_ms = cfg->put_start_discard_timeout_sec * 1000;
    svc->release_ms = cfg->put_start_release_timeout_sec * 1000;
    svc->stall_ms = cfg->stall_threshold_ms;
    svc->nshards = cfg->shard_count;
    svc->seed = mc_now_ns() ^ ((uint64_t)(uintptr_t)svc << 16);
    /* shards are cache-line aligned so two shards' mutexes never share a line */
    size_t shards_bytes = svc->nshards * sizeof(shard);
    if (posix_memalign((void **)&svc->shards, 64, shards_bytes))
        mc_oom(shards_bytes);
    memset(svc->shards, 0, shards_bytes);
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        pthread_mutex_init(&sh->mu, NULL);
        sh->mask = 15;
        sh->slots = mc_xcalloc(sh->mask + 1, sizeof(*sh->slots));
        mc_list_init(&sh->proc);
        mc_list_init(&sh->lru);
        mc_list_init(&sh->soft);
        mc_list_init(&sh->gone);
    }
    /* writers (mount/unmount) must not starve behind the stream of readers */
    mc_rwlock_init_writer_first(&svc->seg_lock);
    pthread_mutex_init(&svc->client_mu, NULL);
    pthread_mutex_init(&svc->evict_mu, NULL);
    pthread_mutex_init(&svc->defer_mu, NULL);
    mc_list_init(&svc->deferred);
    svc->defer_min = UINT64_MAX;
    atomic_init(&svc->last_tick, now_ms(svc));
    /* Epochs of a restarted master must pass every epoch the previous one handed out
     * (owners keep their fences across a master restart): by default they start at the
     * wall clock in ms times 1024, which stays ahead as long as fewer than 1024 raises
     * per pair happened per millisecond of the previous run's life. */
    svc->fence_base = cfg->fence_epoch_base ? cfg->fence_epoch_base : mc_wall_ms() << 10;
    pthread_rwlock_init(&svc->fence_lock, NULL);
    mc_list_init(&svc->quarantine);
    mc__offload_create(svc); /* the disk tier's state, with enable_offload */
    mc__tasks_create(svc);   /* replica copy / move tasks (tasks.c) */
    pthread_mutex_init(&svc->ha_mu, NULL); /* ha_gate.c */
    *out = svc;
    return MC_OK;
}

void mc_master_service_destroy(mc_master_service *svc)
{
    if (!svc)
        return;
    /* no call is in flight: free the records directly, no space accounting needed */
    for (uint32_t i = 0; i < svc->nshards; i++) {
        shard *sh = &svc->shards[i];
        for (uint32_t b = 0; b <= sh->mask; b++)
            free(slot_obj(sh->slots[b]));
        mc_list *g;
        while ((g = mc_list_pop_front(&sh->gone)))
            free(obj_of(g));
        free(sh->slots);
        pthread_mutex_destroy(&sh->mu);
    }
    free(svc->shards);
    mc_list *it;
    while ((it = mc_list_pop_front(&svc->deferred)))
        free(obj_of(it));
    for (uint32_t i = 0; i < svc->nslots; i++)
        if (svc->segs[i])
            mc__seg_free(svc->segs[i]);
    free(svc->segs);
    free(svc->clients);
    pthread_rwlock_destroy(&svc->seg_lock);
    pthread_mutex_destroy(&svc->client_mu);
    pthread_mutex_destroy(&svc->evict_mu);
    pthread_mutex_destroy(&svc->defer_mu);
    pthread_mutex_destroy(&svc->ha_mu);
    mc__inflight_destroy(svc);
    mc__fence_destroy(svc);
    mc__offload_destroy(svc);
    mc__tasks_destroy(svc);
    free(svc);
}

uint64_t mc_master_service_now_ms(mc_master_service *svc)
{
    return now_ms(svc);
}

/* ---- tick ---- */

/* Clears lapsed soft pins in the soft lists of SOFT_SWEEP_SHARDS shards per tick (round
 * robin), so soft_pin_key_count falls without waiting for eviction to pass by. */
static void sweep_soft_pins(mc_master_service *svc)
{
    uint32_t n = svc->nshards < SOFT_SWEEP_SHARDS ? svc->nshards : SOFT_SWEEP_SHARDS;
    for (uint32_t k = 0; k < n; k++) {
        shard *sh = &svc->shards[svc->sweep_pos++ & (svc->nshards - 1)];
        pthread_mutex_lock(&sh->mu);
        uint64_t now = now_ms(svc);
        obj *o;
        MC_LIST_FOREACH_ENTRY(o, &sh->soft, obj, link)
            if ((o->flags & F_SOFT) && o->pin <= now)
                mc__set_soft(svc, o, false); /* stays in the soft list until relinked */
        pthread_mutex_unlock(&sh->mu);
    }
}

/* The master's own stalls: the tick runs every few ms, so a gap since the end of the
 * previous tick longer than stall_ms means this process did not run (SIGSTOP, a paused
 * VM, swapping, a debugger). The clients' heartbeats sent meanwhile sit in the sockets
 * and are read only now, after this tick: expiring by the deadlines would drop every
 * live client. The gap is measured from the end of the previous tick, so a long tick
 * (eviction, unmounts) is not mistaken for a stall. */
static void notice_stall(mc_master_service *svc)
{
    if (!svc->stall_ms)
        return;
    uint64_t now = now_ms(svc), last = cget(&svc->last_tick);
    if (now > last && now - last > svc->stall_ms)
        mc__grace_clients(svc, now, now - last);
}

void mc_master_service_tick(mc_master_service *svc)
{
    if (atomic_load(&svc->ha_enabled) && atomic_load(&svc->ha_role) != MC_MASTER_ROLE_LEADER) {
        /* an HA standby (or deposed): the clients ping the leader only, and what the
         * index holds is the leader's to change (docs/ha.md "Replication"): no expiry,
         * no eviction; the copied clients stay alive until a promotion */
        mc__clients_refresh(svc, now_ms(svc));
        return;
    }
    notice_stall(svc); /* before expiry: it is what expiry must not act on */
    mc__defer_reap(svc, now_ms(svc));
    mc__expire_clients(svc, now_ms(svc));
    mc__graceful_unmount_reap(svc, now_ms(svc));
    mc__release_stale_puts(svc);
    mc__quarantine_reap(svc, now_ms(svc)); /* the release-timeout rule; acks reap in ping */
    mc__offload_tick(svc, now_ms(svc));    /* disk-tier tasks never reported */
    mc__tasks_tick(svc, now_ms(svc));      /* copy / move tasks: timeouts, gone targets */
    sweep_soft_pins(svc);
    /* evict when a put failed for space (and eviction is on) or above the watermark */
    uint64_t cap = cget(&svc->capacity);
    bool need = atomic_exchange(&svc->need_evict, false) && svc->cfg.eviction_ratio > 0;
    bool over = cap && (double)cget(&svc->allocated) >
                           svc->cfg.eviction_high_watermark_ratio * (double)cap;
    if (need || over)
        mc_master_service_evict(svc, 0);
    atomic_store_explicit(&svc->last_tick, now_ms(svc), memory_order_relaxed);
}
