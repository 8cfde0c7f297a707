/* reads.c: the read path of the master core: get_replica_list (single, batch, by
 * regex) and exist_key, each granting a read lease (upstream GetReplicaList, ExistKey,
 * upstream-mooncake.md §4.1, §4.4), and the PCRE2 helper remove.c shares. It never
 * changes what is stored nor gives space back. Layout and locks: master/internal.h. */
#include "master/internal.h"

#include <errno.h>

#include "mooncake/log.h"
#include "mooncake/mc_time.h"

#define TAG "master"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define REGEX_MATCH_LIMIT 1000000u /* per key: a pathological pattern fails, not hangs */
/* per request: a pattern that stays under the per-key limit on every key can still
 * hold an RPC thread for seconds over a large index (measured: 2-4 ms a key with 64-hex
 * keys, 11-22 s for 3000 keys, long enough for the master to expire the clients whose
 * heartbeats waited behind it); the walk stops after this long and the call fails.
 * A plain pattern scans millions of keys in that time. */
#define REGEX_BUDGET_US 2000000u
#define REGEX_CLOCK_EVERY 64u /* keys matched between clock reads */

/* One key's lookup; out may be NULL (exist: the lease is granted all the same). */
static int do_get(mc_master_service *svc, const void *key, size_t len, uint64_t h,
                  mc_master_replica_list *out)
{
    int rc = check_key(key, len);
    if (rc)
        return rc;
    obj *o;
    shard *sh = lock_key(svc, key, len, h, &o);
    if (!o) {
        rc = MC_OBJECT_NOT_FOUND;
    } else if (o->flags & F_PROC) {
        rc = MC_REPLICA_IS_NOT_READY; /* only a write in flight: nothing to read yet */
    } else {
        if (out)
            o = mc__offload_on_get(svc, sh, o); /* disk hit: may start a promotion */
        grant_lease(sh, o, now_ms(svc));
        if (out) {
            mc__fill_list(svc, o, MC_MASTER_REPLICA_COMPLETE, out);
            out->lease_ttl_ms = svc->lease_ttl;
            if (!out->n && o->nrep)
                rc = MC_REPLICA_IS_NOT_READY; /* every replica awaits its owner */
        }
    }
    pthread_mutex_unlock(&sh->mu);
    if (rc && out) {
        out->n = 0;
        out->lease_ttl_ms = 0;
    }
    return rc;
}

int mc_master_service_get_replica_list(mc_master_service *svc, const void *key,
                                       size_t key_len, mc_master_replica_list *out)
{
    int rc = out ? do_get(svc, key, key_len, key_hash(svc, key, key_len), out)
                 : MC_INVALID_PARAMS;
    count_op(svc, MC_MASTER_OP_GET_REPLICA_LIST, rc);
    return rc;
}

int mc_master_service_batch_get_replica_list(mc_master_service *svc,
                                             const mc_master_key *keys, size_t n,
                                             mc_master_replica_list *outs, int *statuses)
{
    if (n && (!keys || !outs || !statuses))
        return MC_INVALID_PARAMS;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = do_get(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i), &outs[i]);
        ahead_done(&a, statuses[i]);
    }
    return ahead_end(svc, &a, MC_MASTER_BATCH_GET_REPLICA_LIST);
}

/* exist_key: 1 / 0 / a negative code (a bad key). */
static int do_exist(mc_master_service *svc, const void *key, size_t len, uint64_t h)
{
    int rc = do_get(svc, key, len, h, NULL);
    if (rc == MC_OK)
        return 1;
    if (rc == MC_OBJECT_NOT_FOUND || rc == MC_REPLICA_IS_NOT_READY)
        return 0;
    return rc;
}

int mc_master_service_exist_key(mc_master_service *svc, const void *key, size_t key_len)
{
    int rc = do_exist(svc, key, key_len, key_hash(svc, key, key_len));
    count_op(svc, MC_MASTER_OP_EXIST_KEY, rc);
    return rc;
}

int mc_master_service_batch_exist_key(mc_master_service *svc, const mc_master_key *keys,
                                      size_t n, int *results)
{
    if (n && (!keys || !results))
        return MC_INVALID_PARAMS;
    ahead a;
    ahead_init(svc, &a, keys, n);
    for (size_t i = 0; i < n; i++) { /* an absent key (0) is an answer, not a failure */
        results[i] = do_exist(svc, keys[i].data, keys[i].len, ahead_next(svc, &a, i));
        ahead_done(&a, results[i]);
    }
    (void)ahead_end(svc, &a, MC_MASTER_BATCH_EXIST_KEY);
    return MC_OK;
}

/* ---- regex ---- */

struct mc__regex {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    uint64_t deadline_us; /* mc_now_us() past which matching fails (REGEX_BUDGET_US) */
    uint32_t calls;
    int failed;           /* 0, or why matching stopped: a PCRE2 error or -ETIMEDOUT */
};

int mc__regex_create(const char *pattern, size_t len, mc__regex **out)
{
    *out = NULL;
    if ((!pattern && len) || len > MC_MASTER_REGEX_MAX)
        return MC_INVALID_PARAMS;
    int err;
    PCRE2_SIZE off;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)(pattern ? pattern : ""), len, 0, &err, &off, NULL);
    if (!code)
        return MC_INVALID_PARAMS; /* a syntax error in the caller's pattern */
    mc__regex *r = mc_xcalloc(1, sizeof(*r));
    r->code = code;
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* optional: else the interpreter */
    r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
    r->mctx = pcre2_match_context_create(NULL);
    if (!r->md || !r->mctx)
        mc_oom(sizeof(pcre2_match_data *)); /* pcre2's own allocations failed */
    pcre2_set_match_limit(r->mctx, REGEX_MATCH_LIMIT);
    r->deadline_us = mc_now_us() + REGEX_BUDGET_US;
    *out = r;
    return MC_OK;
}

void mc__regex_destroy(mc__regex *r)
{
    if (!r)
        return;
    pcre2_match_context_free(r->mctx);
    pcre2_match_data_free(r->md);
    pcre2_code_free(r->code);
    free(r);
}

bool mc__regex_match(mc__regex *r, obj *o)
{
    if (r->failed)
        return false;
    if (++r->calls % REGEX_CLOCK_EVERY == 0 && mc_now_us() > r->deadline_us) {
        r->failed = -ETIMEDOUT;
        return false;
    }
    /* unanchored search, as upstream's std::regex_search */
    int m = pcre2_match(r->code, okey(o), o->key_len, 0, 0, r->md, r->mctx);
    if (m < 0 && m != PCRE2_ERROR_NOMATCH)
        r->failed = m; /* the match limit (or another PCRE2 limit) on this key */
    return m >= 0;
}

bool mc__regex_match_failed(const mc__regex *r)
{
    return r->failed != 0;
}

int mc__regex_failed(mc__regex *r, const char *what)
{
    if (!r || !r->failed)
        return MC_OK;
    if (r->failed == -ETIMEDOUT) {
        mc_log(MC_LOG_WARN, TAG, "%s: the pattern took more than %u ms over the keys it "
               "looked at (%u): the call fails; use a pattern that matches without "
               "backtracking (anchored, no nested repetition)", what,
               REGEX_BUDGET_US / 1000, r->calls);
    } else {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(r->failed, msg, sizeof msg);
        mc_log(MC_LOG_WARN, TAG, "%s: matching a key failed (%s; %u steps at most per "
               "key): the call fails; use a pattern that matches without backtracking",
               what, (const char *)msg, REGEX_MATCH_LIMIT);
    }
    return MC_INVALID_PARAMS;
}

int mc_master_service_get_replica_list_by_regex(mc_master_service *svc, const char *pattern,
                                                size_t pattern_len, mc_master_regex_cb cb,
                                                void *ctx)
{
    mc__regex *r;
    int rc = mc__regex_create(pattern, pattern_len, &r);
    if (rc == MC_OK) {
        /* one list reused for every match (it is large: MC_MASTER_MAX_REPLICAS entries) */
        mc_master_replica_list *list = mc_xmalloc(sizeof(*list));
        bool stop = false;
        for (uint32_t i = 0; i < svc->nshards && !stop; i++) {
            shard *sh = &svc->shards[i];
            pthread_mutex_lock(&sh->mu);
            uint64_t now = now_ms(svc);
            for (uint32_t b = 0; b <= sh->mask && !stop; b++) {
                obj *o = slot_obj(sh->slots[b]);
                if (!o || (o->flags & F_PROC) || !mc__regex_match(r, o)) {
                    stop = r->failed != 0;
                    continue;
                }
                /* granting a lease relinks o but does not move it in the table, so the
                 * slot walk goes on safely */
                grant_lease(sh, o, now);
                mc__fill_list(svc, o, MC_MASTER_REPLICA_COMPLETE, list);
                list->lease_ttl_ms = svc->lease_ttl;
                if (cb && cb(okey(o), o->key_len, list, ctx))
                    stop = true;
            }
            pthread_mutex_unlock(&sh->mu);
        }
        free(list);
        rc = mc__regex_failed(r, "get_replica_list_by_regex");
        mc__regex_destroy(r);
    }
    count_op(svc, MC_MASTER_OP_GET_REPLICA_LIST_BY_REGEX, rc);
    return rc;
}
