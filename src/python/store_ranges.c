/* store_ranges.c: the ranged data methods of MooncakeDistributedStore and their sessions
 * (upstream HEAD store_py.cpp): get_into_ranges, batch_get_session_start / _end,
 * batch_get_into_multi_buffer_ranges, batch_put_session_start / _end / _revoke,
 * batch_put_from_multi_buffer_ranges. The C side (store.h "Ranged I/O and sessions") is
 * stateless; the sessions live here, in two dicts of the store object (key bytes -> the
 * lease / reservation as bytes), touched only with the GIL held. Ownership and lifetime
 * (docs/sessions.md): a session belongs to the store object that started it, for that
 * key; *_end (or _revoke) ends it; starting again replaces it (a put session is revoked
 * first); close() and garbage collection revoke every put session still open and drop
 * the get sessions (a get session holds nothing on the master but its lease). */
#include "store_py.h"

#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

/* A put session's value: the reservation and whether a ranged write into it failed (its
 * end then revokes instead of publishing undefined bytes). */
typedef struct {
    mc_store_reservation res;
    int failed;
} put_sess;

static PyObject *key_bytes(const mc_store_key *k)
{
    return PyBytes_FromStringAndSize(k->data, (Py_ssize_t)k->len);
}

/* The session dict `*slot` (created on first use). Borrowed, or NULL (exception). */
static PyObject *sess_dict(PyObject **slot)
{
    if (!*slot)
        *slot = PyDict_New();
    return *slot;
}

/* The session value of key k in d (borrowed bytes of `size` bytes), or NULL (none;
 * no exception). */
static PyObject *sess_get(PyObject *d, const mc_store_key *k, size_t size)
{
    if (!d)
        return NULL;
    PyObject *kb = key_bytes(k);
    if (!kb) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *v = PyDict_GetItemWithError(d, kb);
    Py_DECREF(kb);
    if (!v || !PyBytes_Check(v) || (size_t)PyBytes_GET_SIZE(v) != size) {
        PyErr_Clear();
        return NULL;
    }
    return v;
}

static int sess_set(PyObject *d, const mc_store_key *k, const void *val, size_t size)
{
    PyObject *kb = key_bytes(k);
    PyObject *v = PyBytes_FromStringAndSize(val, (Py_ssize_t)size);
    int rc = kb && v ? PyDict_SetItem(d, kb, v) : -1;
    Py_XDECREF(kb);
    Py_XDECREF(v);
    return rc;
}

static void sess_del(PyObject *d, const mc_store_key *k)
{
    if (!d)
        return;
    PyObject *kb = key_bytes(k);
    if (kb && PyDict_DelItem(d, kb) < 0)
        PyErr_Clear();
    Py_XDECREF(kb);
    if (!kb)
        PyErr_Clear();
}

void mcpy_sessions_drop(mcpy_store *self)
{
    Py_CLEAR(self->get_sessions);
    PyObject *d = self->put_sessions;
    self->put_sessions = NULL;
    if (!d)
        return;
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n > 0 && self->store && mc_store_is_setup(self->store)) {
        mc_store_key *keys = PyMem_Calloc((size_t)n, sizeof *keys);
        int *res = PyMem_Calloc((size_t)n, sizeof *res);
        if (keys && res) {
            Py_ssize_t pos = 0, i = 0;
            PyObject *k, *v;
            while (PyDict_Next(d, &pos, &k, &v) && i < n) {
                keys[i].data = PyBytes_AS_STRING(k);
                keys[i].len = (size_t)PyBytes_GET_SIZE(k);
                i++;
            }
            mc_log(MC_LOG_WARN, TAG, "revoking %zd put session(s) still open at close", i);
            mc_store *s = self->store;
            Py_BEGIN_ALLOW_THREADS
            mc_store_batch_put_abort(s, keys, (size_t)i, res);
            Py_END_ALLOW_THREADS
        }
        PyMem_Free(keys);
        PyMem_Free(res);
    }
    Py_DECREF(d);
}

/* ---- argument helpers ---- */

/* Rows of fragments of a *_multi_buffer_ranges call: keys[i] <-> ptrs/sizes/offsets row i
 * (equal lengths; else that key gets INVALID_PARAMS). */
typedef struct {
    mcpy_keys keys;
    uint64_t *ptrs, *sizes, *offs;
    size_t *pst, *pct, *sst, *sct, *ost, *oct;
    size_t np, ns, no;
    mc_store_range *frags; /* one per fragment, rows back to back */
    mc_store_range **rows;
    size_t *nrows;
    int64_t *res;
} mranges;

static void mranges_clear(mranges *m)
{
    mcpy_keys_clear(&m->keys);
    PyMem_Free(m->ptrs);
    PyMem_Free(m->sizes);
    PyMem_Free(m->offs);
    PyMem_Free(m->pst);
    PyMem_Free(m->pct);
    PyMem_Free(m->sst);
    PyMem_Free(m->sct);
    PyMem_Free(m->ost);
    PyMem_Free(m->oct);
    PyMem_Free(m->frags);
    PyMem_Free(m->rows);
    PyMem_Free(m->nrows);
    PyMem_Free(m->res);
}

/* -1 exception, 0 ready (res[i] MC_INVALID_PARAMS for rows left out: rows[i] NULL),
 * 1 outer lengths differ. */
static int mranges_parse(mranges *m, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                         PyObject *a_offs, const char *fn, const char *offs_name)
{
    memset(m, 0, sizeof *m);
    if (mcpy_keys_from(a_keys, fn, "keys", &m->keys) < 0 ||
        mcpy_u64_list2(a_ptrs, fn, "all_buffer_ptrs", &m->ptrs, &m->pst, &m->pct, &m->np) < 0 ||
        mcpy_u64_list2(a_sizes, fn, "all_sizes", &m->sizes, &m->sst, &m->sct, &m->ns) < 0 ||
        mcpy_u64_list2(a_offs, fn, offs_name, &m->offs, &m->ost, &m->oct, &m->no) < 0)
        return -1;
    size_t n = m->keys.n;
    m->res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!m->res) {
        PyErr_NoMemory();
        return -1;
    }
    if (m->np != n || m->ns != n || m->no != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys but %zu pointer, %zu size and %zu offset rows",
               fn, n, m->np, m->ns, m->no);
        return 1;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += m->pct[i];
    m->frags = PyMem_Calloc(total ? total : 1, sizeof(mc_store_range));
    m->rows = PyMem_Calloc(n ? n : 1, sizeof(mc_store_range *));
    m->nrows = PyMem_Calloc(n ? n : 1, sizeof(size_t));
    if (!m->frags || !m->rows || !m->nrows) {
        PyErr_NoMemory();
        return -1;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t c = m->pct[i];
        if (c != m->sct[i] || c != m->oct[i] || c > MC_STORE_MAX_PARTS) {
            mc_log(MC_LOG_ERROR, TAG, "%s: key #%zu has %zu pointers, %zu sizes and %zu "
                   "offsets", fn, i, c, m->sct[i], m->oct[i]);
            m->res[i] = MC_INVALID_PARAMS;
            continue;
        }
        m->rows[i] = &m->frags[at];
        m->nrows[i] = c;
        for (size_t j = 0; j < c; j++, at++) {
            m->frags[at].buf = (void *)(uintptr_t)m->ptrs[m->pst[i] + j];
            m->frags[at].len = m->sizes[m->sst[i] + j];
            m->frags[at].offset = m->offs[m->ost[i] + j];
        }
    }
    return 0;
}

/* ---- get sessions ---- */

/* Copies row i's session (a value of `size` bytes kept in dict d under its key) into
 * out; a row without one is refused in place (result INVALID_PARAMS, no fragments) and
 * the first such row of the call is logged, naming `kind` ("get" / "put"). Returns
 * whether out was filled. GIL held. */
static bool take_session(PyObject *d, mranges *m, size_t i, size_t size, void *out,
                         const char *fn, const char *kind, bool *logged)
{
    PyObject *v = sess_get(d, &m->keys.keys[i], size);
    if (!v) {
        if (!*logged)
            mc_log(MC_LOG_ERROR, TAG, "%s: key #%zu has no %s session (call "
                   "batch_%s_session_start first)", fn, i, kind, kind);
        *logged = true;
        m->res[i] = MC_INVALID_PARAMS;
        m->rows[i] = NULL;
        m->nrows[i] = 0;
        return false;
    }
    memcpy(out, PyBytes_AS_STRING(v), size);
    return true;
}

static PyObject *store_batch_get_session_start(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_get_session_start";
    mcpy_keys keys;
    if (!mcpy_state_of(o) || mcpy_arg_keys(args, kwds, fn, NULL, &keys) < 0)
        return NULL;
    size_t n = keys.n;
    mc_store_lease *ls = PyMem_Calloc(n ? n : 1, sizeof *ls);
    int *res = PyMem_Calloc(n ? n : 1, sizeof *res);
    PyObject *ret = NULL, *d = sess_dict(&self->get_sessions);
    if (!ls || !res || !d) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    mc_store_batch_get_lease(self->store, keys.keys, n, ls, res);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++) {
        if (res[i] != MC_OK) {
            sess_del(d, &keys.keys[i]);
            continue;
        }
        if (sess_set(d, &keys.keys[i], &ls[i], sizeof ls[i]) < 0)
            goto out;
    }
    ret = mcpy_int_list(res, n);
out:
    PyMem_Free(ls);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_get_session_end(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_keys keys;
    if (!mcpy_state_of(o) ||
        mcpy_arg_keys(args, kwds, "batch_get_session_end", NULL, &keys) < 0)
        return NULL;
    int rc = MC_OK;
    for (size_t i = 0; i < keys.n; i++) {
        if (!sess_get(self->get_sessions, &keys.keys[i], sizeof(mc_store_lease)))
            rc = rc == MC_OK ? MC_INVALID_PARAMS : rc; /* no session for that key */
        sess_del(self->get_sessions, &keys.keys[i]);
    }
    mcpy_keys_clear(&keys);
    return PyLong_FromLong(rc);
}

static PyObject *store_batch_get_into_multi_buffer_ranges(PyObject *o, PyObject *args,
                                                          PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_get_into_multi_buffer_ranges";
    static char *kw[] = {"keys", "all_buffer_ptrs", "all_sizes", "all_src_offsets", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes, *a_offs;
    if (!mcpy_method_args(o, args, kwds, "OOOO", fn, kw, &a_keys, &a_ptrs, &a_sizes, &a_offs))
        return NULL;
    mranges m;
    PyObject *ret = NULL;
    const mc_store_lease **lp = NULL;
    int pr = mranges_parse(&m, a_keys, a_ptrs, a_sizes, a_offs, fn, "all_src_offsets");
    if (pr < 0)
        goto out;
    size_t n = m.keys.n;
    if (pr > 0) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto out;
    }
    /* The leases are copied out of the dict: the C call runs without the GIL. */
    mc_store_lease *ls = PyMem_Calloc(n ? n : 1, sizeof *ls);
    lp = PyMem_Calloc(n ? n : 1, sizeof *lp);
    if (!ls || !lp) {
        PyMem_Free(ls);
        PyErr_NoMemory();
        goto out;
    }
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        if (!m.rows[i])
            continue;
        if (take_session(self->get_sessions, &m, i, sizeof ls[i], &ls[i], fn, "get", &logged))
            lp[i] = &ls[i];
    }
    /* rows left out are given an empty row with no lease (the C call answers them
     * INVALID_PARAMS) and their code is restored after */
    int64_t *cres = PyMem_Calloc(n ? n : 1, sizeof *cres);
    if (!cres) {
        PyMem_Free(ls);
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    mc_store_batch_read_ranges(self->store, lp, n, m.rows, m.nrows, cres);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        if (m.rows[i] || m.res[i] == 0)
            m.res[i] = cres[i];
    PyMem_Free(cres);
    PyMem_Free(ls);
    ret = mcpy_i64_list(m.res, n);
out:
    PyMem_Free(lp);
    mranges_clear(&m);
    return ret;
}

/* ---- put sessions ---- */

static PyObject *store_batch_put_session_start(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_put_session_start";
    static char *kw[] = {"keys", "sizes", "config", NULL};
    PyObject *a_keys, *a_sizes, *a_cfg = NULL;
    mcpy_state *st = mcpy_method_args(o, args, kwds, "OO|O", fn, kw, &a_keys, &a_sizes, &a_cfg);
    if (!st)
        return NULL;
    mcpy_keys keys;
    uint64_t *sizes = NULL;
    size_t ns = 0;
    mcpy_rc rc;
    bool have_rc = false;
    mc_store_reservation *rs = NULL;
    int *res = NULL;
    PyObject *ret = NULL, *d;
    if (mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    if (mcpy_u64_list(a_sizes, fn, "sizes", &sizes, &ns) < 0 ||
        mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
        goto out;
    have_rc = true;
    size_t n = keys.n;
    if (ns != n) {
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu keys but %zu sizes", fn, n, ns);
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto out;
    }
    d = sess_dict(&self->put_sessions);
    rs = PyMem_Calloc(n ? n : 1, sizeof *rs);
    res = PyMem_Calloc(n ? n : 1, sizeof *res);
    if (!d || !rs || !res) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto out;
    }
    /* A put session this object already holds for a key is revoked first (restart). */
    for (size_t i = 0; i < n; i++)
        if (sess_get(d, &keys.keys[i], sizeof(put_sess))) {
            int r;
            mc_store *s = self->store;
            Py_BEGIN_ALLOW_THREADS
            mc_store_batch_put_abort(s, &keys.keys[i], 1, &r);
            Py_END_ALLOW_THREADS
            sess_del(d, &keys.keys[i]);
        }
    Py_BEGIN_ALLOW_THREADS
    mc_store_batch_put_reserve(self->store, keys.keys, sizes, n, &rc.c, rs, res);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++) {
        if (res[i] != MC_OK)
            continue;
        put_sess ps = {rs[i], 0};
        if (sess_set(d, &keys.keys[i], &ps, sizeof ps) < 0)
            goto out;
    }
    ret = mcpy_int_list(res, n);
out:
    if (have_rc)
        mcpy_rc_clear(&rc);
    PyMem_Free(sizes);
    PyMem_Free(rs);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_put_from_multi_buffer_ranges(PyObject *o, PyObject *args,
                                                          PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "batch_put_from_multi_buffer_ranges";
    static char *kw[] = {"keys", "all_buffer_ptrs", "all_sizes", "all_dst_offsets", NULL};
    PyObject *a_keys, *a_ptrs, *a_sizes, *a_offs;
    if (!mcpy_method_args(o, args, kwds, "OOOO", fn, kw, &a_keys, &a_ptrs, &a_sizes, &a_offs))
        return NULL;
    mranges m;
    PyObject *ret = NULL;
    put_sess *ps = NULL;
    const mc_store_reservation **rp = NULL;
    int64_t *cres = NULL;
    int pr = mranges_parse(&m, a_keys, a_ptrs, a_sizes, a_offs, fn, "all_dst_offsets");
    if (pr < 0)
        goto out;
    size_t n = m.keys.n;
    if (pr > 0) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto out;
    }
    ps = PyMem_Calloc(n ? n : 1, sizeof *ps);
    rp = PyMem_Calloc(n ? n : 1, sizeof *rp);
    cres = PyMem_Calloc(n ? n : 1, sizeof *cres);
    if (!ps || !rp || !cres) {
        PyErr_NoMemory();
        goto out;
    }
    bool logged = false;
    for (size_t i = 0; i < n; i++) {
        if (!m.rows[i])
            continue;
        if (take_session(self->put_sessions, &m, i, sizeof ps[i], &ps[i], fn, "put", &logged))
            rp[i] = &ps[i].res;
    }
    Py_BEGIN_ALLOW_THREADS
    mc_store_batch_write_ranges(self->store, rp, n, m.rows, m.nrows, cres);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++) {
        if (!rp[i])
            continue;
        m.res[i] = cres[i];
        /* a failed transfer leaves undefined bytes: its session may only be revoked */
        if (cres[i] < 0 && cres[i] != MC_INVALID_PARAMS) {
            PyObject *v = sess_get(self->put_sessions, &m.keys.keys[i], sizeof(put_sess));
            if (v) {
                ps[i].failed = 1;
                if (sess_set(self->put_sessions, &m.keys.keys[i], &ps[i], sizeof ps[i]) < 0)
                    goto out;
            }
        }
    }
    ret = mcpy_i64_list(m.res, n);
out:
    PyMem_Free(ps);
    PyMem_Free(rp);
    PyMem_Free(cres);
    mranges_clear(&m);
    return ret;
}

/* batch_put_session_end (commit) / batch_put_session_revoke (abort). */
static PyObject *put_session_finish(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                                    bool commit)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_keys keys;
    if (!mcpy_state_of(o) || mcpy_arg_keys(args, kwds, fn, NULL, &keys) < 0)
        return NULL;
    size_t n = keys.n;
    int *res = PyMem_Calloc(n ? n : 1, sizeof *res);
    int *cres = PyMem_Calloc(n ? n : 1, sizeof *cres);
    mc_store_key *ck = PyMem_Calloc(n ? n : 1, sizeof *ck), *ak = PyMem_Calloc(n ? n : 1, sizeof *ak);
    size_t *cmap = PyMem_Calloc(n ? n : 1, sizeof *cmap), *amap = PyMem_Calloc(n ? n : 1, sizeof *amap);
    PyObject *ret = NULL;
    if (!res || !cres || !ck || !ak || !cmap || !amap) {
        PyErr_NoMemory();
        goto out;
    }
    size_t nc = 0, na = 0;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = sess_get(self->put_sessions, &keys.keys[i], sizeof(put_sess));
        if (!v) {
            res[i] = MC_INVALID_PARAMS; /* no put session for that key here */
            continue;
        }
        put_sess p;
        memcpy(&p, PyBytes_AS_STRING(v), sizeof p);
        bool dup = false; /* a key twice: the first position ends it */
        for (size_t k = 0; k < nc && !dup; k++)
            dup = ck[k].len == keys.keys[i].len && !memcmp(ck[k].data, keys.keys[i].data, ck[k].len);
        for (size_t k = 0; k < na && !dup; k++)
            dup = ak[k].len == keys.keys[i].len && !memcmp(ak[k].data, keys.keys[i].data, ak[k].len);
        if (dup) {
            res[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (commit && !p.failed) {
            ck[nc] = keys.keys[i];
            cmap[nc++] = i;
        } else {
            ak[na] = keys.keys[i];
            amap[na++] = i;
        }
    }
    mc_store *s = self->store;
    int *ares = PyMem_Calloc(na ? na : 1, sizeof *ares);
    if (!ares) {
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    if (nc)
        mc_store_batch_put_commit(s, ck, nc, cres);
    if (na)
        mc_store_batch_put_abort(s, ak, na, ares);
    Py_END_ALLOW_THREADS
    for (size_t k = 0; k < nc; k++)
        res[cmap[k]] = cres[k];
    for (size_t k = 0; k < na; k++)
        /* a commit of a session whose write failed was revoked instead */
        res[amap[k]] = commit ? MC_TRANSFER_FAIL : ares[k];
    PyMem_Free(ares);
    for (size_t k = 0; k < nc; k++)
        sess_del(self->put_sessions, &ck[k]);
    for (size_t k = 0; k < na; k++)
        sess_del(self->put_sessions, &ak[k]);
    ret = mcpy_int_list(res, n);
out:
    PyMem_Free(res);
    PyMem_Free(cres);
    PyMem_Free(ck);
    PyMem_Free(ak);
    PyMem_Free(cmap);
    PyMem_Free(amap);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_put_session_end(PyObject *o, PyObject *a, PyObject *k)
{
    return put_session_finish(o, a, k, "batch_put_session_end", true);
}

static PyObject *store_batch_put_session_revoke(PyObject *o, PyObject *a, PyObject *k)
{
    return put_session_finish(o, a, k, "batch_put_session_revoke", false);
}

/* ---- get_into_ranges: buffer-major ranged gather (no session) ---- */

/* seq[i] as a new tuple, or NULL (no exception) when seq has no such list item. */
static PyObject *sub_tuple(PyObject *seq, size_t i)
{
    if (!seq || (size_t)PyTuple_GET_SIZE(seq) <= i)
        return NULL;
    PyObject *it = PyTuple_GET_ITEM(seq, (Py_ssize_t)i);
    if (PyUnicode_Check(it) || PyBytes_Check(it) || !PySequence_Check(it))
        return NULL;
    PyObject *t = PySequence_Tuple(it);
    if (!t)
        PyErr_Clear();
    return t;
}

static PyObject *store_get_into_ranges(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_store *self = (mcpy_store *)o;
    static const char *fn = "get_into_ranges";
    static char *kw[] = {"buffer_ptrs", "all_keys", "all_dst_offsets", "all_src_offsets",
                         "all_sizes", NULL};
    PyObject *a_bufs, *a_keys, *a_dst, *a_src, *a_sizes;
    if (!mcpy_method_args(o, args, kwds, "OOOOO", fn, kw, &a_bufs, &a_keys, &a_dst, &a_src,
                          &a_sizes))
        return NULL;
    uint64_t *bufs = NULL;
    size_t nb = 0;
    PyObject *keys_t = NULL, *dst_t = NULL, *src_t = NULL, *size_t_ = NULL, *ret = NULL;
    PyObject *keep = PyList_New(0); /* the per-buffer tuples and key rows, kept alive */
    mc_store_key *items = NULL;
    size_t *ibuf = NULL, *ikey = NULL;
    mc_store_range *frags = NULL, **rows = NULL;
    uint64_t *fbase = NULL, *fext = NULL;
    size_t *nrows = NULL;
    int64_t *res = NULL;
    size_t ni = 0, nf = 0, cap_i = 0, cap_f = 0;
    if (!keep || mcpy_u64_list(a_bufs, fn, "buffer_ptrs", &bufs, &nb) < 0)
        goto out;
    if (!(keys_t = mcpy_seq_tuple(a_keys, fn, "all_keys")) ||
        !(dst_t = mcpy_seq_tuple(a_dst, fn, "all_dst_offsets")) ||
        !(src_t = mcpy_seq_tuple(a_src, fn, "all_src_offsets")) ||
        !(size_t_ = mcpy_seq_tuple(a_sizes, fn, "all_sizes")))
        goto out;
    bool top_ok = (size_t)PyTuple_GET_SIZE(keys_t) == nb &&
                  (size_t)PyTuple_GET_SIZE(dst_t) == nb &&
                  (size_t)PyTuple_GET_SIZE(src_t) == nb &&
                  (size_t)PyTuple_GET_SIZE(size_t_) == nb;
    if (!top_ok)
        mc_log(MC_LOG_ERROR, TAG, "%s: %zu buffers but %zd key, %zd dst, %zd src and %zd size "
               "lists", fn, nb, PyTuple_GET_SIZE(keys_t), PyTuple_GET_SIZE(dst_t),
               PyTuple_GET_SIZE(src_t), PyTuple_GET_SIZE(size_t_));
    /* Pass 1: one item per (buffer, key) whose fragment lists agree; the result shape. */
    ret = PyList_New((Py_ssize_t)nb);
    if (!ret)
        goto out;
    for (size_t i = 0; i < nb; i++) {
        PyObject *kr = sub_tuple(keys_t, i);
        PyObject *row = PyList_New(0);
        if (!row) {
            Py_XDECREF(kr);
            goto fail;
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, row);
        if (!kr)
            continue; /* no key list for this buffer: an empty row */
        if (PyList_Append(keep, kr) < 0) {
            Py_DECREF(kr);
            goto fail;
        }
        Py_DECREF(kr);
        PyObject *dr = sub_tuple(dst_t, i), *sr = sub_tuple(src_t, i), *zr = sub_tuple(size_t_, i);
        size_t nk = (size_t)PyTuple_GET_SIZE(kr);
        for (size_t j = 0; j < nk; j++) {
            mc_store_key key;
            if (mcpy_key(PyTuple_GET_ITEM(kr, (Py_ssize_t)j), fn, "all_keys", &key) < 0) {
                Py_XDECREF(dr);
                Py_XDECREF(sr);
                Py_XDECREF(zr);
                goto fail;
            }
            PyObject *dd = sub_tuple(dr, j), *ss = sub_tuple(sr, j), *zz = sub_tuple(zr, j);
            bool ok = top_ok && dd && ss && zz && PyTuple_GET_SIZE(dd) == PyTuple_GET_SIZE(zz) &&
                      PyTuple_GET_SIZE(ss) == PyTuple_GET_SIZE(zz) &&
                      (size_t)PyTuple_GET_SIZE(zz) <= MC_STORE_MAX_PARTS;
            size_t nfr = ok ? (size_t)PyTuple_GET_SIZE(zz) : 0;
            if (ni == cap_i) {
                cap_i = cap_i ? cap_i * 2 : 16;
                mc_store_key *a = PyMem_Realloc(items, cap_i * sizeof *items);
                size_t *b = a ? PyMem_Realloc(ibuf, cap_i * sizeof *ibuf) : NULL;
                size_t *c = b ? PyMem_Realloc(ikey, cap_i * sizeof *ikey) : NULL;
                size_t *d = c ? PyMem_Realloc(nrows, cap_i * sizeof *nrows) : NULL;
                if (a)
                    items = a;
                if (b)
                    ibuf = b;
                if (c)
                    ikey = c;
                if (d)
                    nrows = d;
                if (!d) {
                    Py_XDECREF(dd), Py_XDECREF(ss), Py_XDECREF(zz);
                    Py_XDECREF(dr), Py_XDECREF(sr), Py_XDECREF(zr);
                    PyErr_NoMemory();
                    goto fail;
                }
            }
            items[ni] = key;
            ibuf[ni] = i;
            ikey[ni] = ok ? nf : SIZE_MAX; /* first fragment, or SIZE_MAX: shape mismatch */
            nrows[ni] = nfr;
            ni++;
            if (nf + nfr > cap_f) {
                while (nf + nfr > cap_f)
                    cap_f = cap_f ? cap_f * 2 : 64;
                mc_store_range *a = PyMem_Realloc(frags, cap_f * sizeof *frags);
                uint64_t *b = a ? PyMem_Realloc(fbase, cap_f * sizeof *fbase) : NULL;
                uint64_t *c = b ? PyMem_Realloc(fext, cap_f * sizeof *fext) : NULL;
                if (a)
                    frags = a;
                if (b)
                    fbase = b;
                if (c)
                    fext = c;
                if (!c) {
                    Py_XDECREF(dd), Py_XDECREF(ss), Py_XDECREF(zz);
                    Py_XDECREF(dr), Py_XDECREF(sr), Py_XDECREF(zr);
                    PyErr_NoMemory();
                    goto fail;
                }
            }
            bool bad = false;
            for (size_t k = 0; k < nfr && !bad; k++) {
                uint64_t dof, sof, len;
                if (mcpy_u64(PyTuple_GET_ITEM(dd, (Py_ssize_t)k), fn, "all_dst_offsets", &dof) < 0 ||
                    mcpy_u64(PyTuple_GET_ITEM(ss, (Py_ssize_t)k), fn, "all_src_offsets", &sof) < 0 ||
                    mcpy_u64(PyTuple_GET_ITEM(zz, (Py_ssize_t)k), fn, "all_sizes", &len) < 0) {
                    bad = true;
                    break;
                }
                mc_store_range *f = &frags[nf + k];
                f->offset = sof;
                f->len = len;
                f->result = MC_OK;
                /* the destination must lie in the registered buffer (upstream checks
                 * every fragment against the registered size of its buffer): checked in
                 * pass 2 without the GIL (the check takes the store's call lock) */
                bool dst_ok = bufs[i] && dof <= UINT64_MAX - len && bufs[i] <= UINT64_MAX - dof - len;
                f->buf = (void *)(uintptr_t)(bufs[i] + dof);
                fbase[nf + k] = bufs[i];
                fext[nf + k] = dst_ok ? dof + len : 0; /* 0: refused */
            }
            Py_XDECREF(dd), Py_XDECREF(ss), Py_XDECREF(zz);
            if (bad) {
                Py_XDECREF(dr), Py_XDECREF(sr), Py_XDECREF(zr);
                goto fail;
            }
            nf += nfr;
        }
        Py_XDECREF(dr), Py_XDECREF(sr), Py_XDECREF(zr);
    }
    /* Pass 2: the C call on the items with a valid shape. */
    rows = PyMem_Calloc(ni ? ni : 1, sizeof *rows);
    res = PyMem_Calloc(ni ? ni : 1, sizeof *res);
    mc_store_key *ckeys = PyMem_Calloc(ni ? ni : 1, sizeof *ckeys);
    mc_store_range **crows = PyMem_Calloc(ni ? ni : 1, sizeof *crows);
    size_t *cn = PyMem_Calloc(ni ? ni : 1, sizeof *cn);
    int64_t *cres = PyMem_Calloc(ni ? ni : 1, sizeof *cres);
    if (!rows || !res || !ckeys || !crows || !cn || !cres) {
        PyMem_Free(ckeys), PyMem_Free(crows), PyMem_Free(cn), PyMem_Free(cres);
        PyErr_NoMemory();
        goto fail;
    }
    size_t nc = 0;
    for (size_t t = 0; t < ni; t++) {
        if (ikey[t] == SIZE_MAX)
            continue;
        rows[t] = &frags[ikey[t]];
        ckeys[nc] = items[t];
        crows[nc] = rows[t];
        cn[nc++] = nrows[t];
    }
    if (nc) {
        mc_store *st = self->store;
        Py_BEGIN_ALLOW_THREADS
        for (size_t k = 0; k < nf; k++) {
            mc_store_range *f = &frags[k];
            if (fext[k] && (f->len == 0 ||
                            mc_store_buffer_holds(st, (void *)(uintptr_t)fbase[k], fext[k])))
                continue;
            f->buf = NULL; /* refused: the C call's fragment check answers -600 */
            f->len = f->len ? f->len : 1;
            f->offset = UINT64_MAX;
        }
        mc_store_batch_get_ranges(st, ckeys, nc, crows, cn, cres);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(ckeys), PyMem_Free(crows), PyMem_Free(cn), PyMem_Free(cres);
    /* Pass 3: results[i][j][k]. */
    for (size_t t = 0; t < ni; t++) {
        PyObject *lst;
        if (ikey[t] == SIZE_MAX) {
            lst = mcpy_code_list(MC_INVALID_PARAMS, 1);
        } else {
            lst = PyList_New((Py_ssize_t)nrows[t]);
            for (size_t k = 0; lst && k < nrows[t]; k++) {
                PyObject *v = PyLong_FromLongLong(rows[t][k].result);
                if (!v) {
                    Py_CLEAR(lst);
                    break;
                }
                PyList_SET_ITEM(lst, (Py_ssize_t)k, v);
            }
        }
        if (!lst || PyList_Append(PyList_GET_ITEM(ret, (Py_ssize_t)ibuf[t]), lst) < 0) {
            Py_XDECREF(lst);
            goto fail;
        }
        Py_DECREF(lst);
    }
    goto out;
fail:
    Py_CLEAR(ret);
out:
    Py_XDECREF(keep);
    Py_XDECREF(keys_t);
    Py_XDECREF(dst_t);
    Py_XDECREF(src_t);
    Py_XDECREF(size_t_);
    PyMem_Free(bufs);
    PyMem_Free(items);
    PyMem_Free(ibuf);
    PyMem_Free(ikey);
    PyMem_Free(nrows);
    PyMem_Free(frags);
    PyMem_Free(fbase);
    PyMem_Free(fext);
    PyMem_Free(rows);
    PyMem_Free(res);
    return ret;
}

PyMethodDef mcpy_range_methods[] = {
    MCPY_M("get_into_ranges", store_get_into_ranges,
      "get_into_ranges(buffer_ptrs: list[int], all_keys: list[list[str]], all_dst_offsets: "
      "list[list[list[int]]], all_src_offsets: list[list[list[int]]], all_sizes: "
      "list[list[list[int]]]) -> list[list[list[int]]]: buffer-major ranged gather: "
      "fragment k of key j goes from the object's bytes [src, src+size) to buffer_ptrs[i] + "
      "dst. results[i][j][k] = size, or negative: -600 when it lies outside the object or "
      "outside the registered buffer (buffers must be registered), the lookup's code (-704) "
      "for every fragment of a missing key; a key whose three fragment lists differ in "
      "length gets [-600]. One lease RPC for all keys."),
    MCPY_M("batch_get_session_start", store_batch_get_session_start,
      "batch_get_session_start(keys: list[str]) -> list[int]: one lookup for all keys; "
      "caches each key's replicas and read lease in this object (0), or a negative code "
      "(-704 missing). A later start replaces the session."),
    MCPY_M("batch_get_into_multi_buffer_ranges", store_batch_get_into_multi_buffer_ranges,
      "batch_get_into_multi_buffer_ranges(keys: list[str], all_buffer_ptrs: list[list[int]], "
      "all_sizes: list[list[int]], all_src_offsets: list[list[int]]) -> list[int]: reads "
      "fragment j of key i, the object's bytes [src, src+size), into its buffer, from the "
      "replica cached by batch_get_session_start (no master RPC). Per key exactly "
      "sum(sizes), or negative: -707 once the session's lease ended, -600 no session / bad "
      "fragment / rows of different lengths, -800 transfer failed."),
    MCPY_M("batch_get_session_end", store_batch_get_session_end,
      "batch_get_session_end(keys: list[str]) -> int: forgets the keys' get sessions (their "
      "leases simply run out). 0, or -600 when a key had no session (the others still end)."),
    MCPY_M("batch_put_session_start", store_batch_put_session_start,
      "batch_put_session_start(keys: list[str], sizes: list[int], config=ReplicateConfig()) "
      "-> list[int]: reserves space for each object (put_start, no transfer; not readable "
      "until batch_put_session_end). 0, -705 the key exists or is being written, -200 no "
      "space, -600 bad key/config or lists of different lengths. An open session of this "
      "object for the key is revoked first."),
    MCPY_M("batch_put_from_multi_buffer_ranges", store_batch_put_from_multi_buffer_ranges,
      "batch_put_from_multi_buffer_ranges(keys: list[str], all_buffer_ptrs: "
      "list[list[int]], all_sizes: list[list[int]], all_dst_offsets: list[list[int]]) -> "
      "list[int]: writes fragment j of key i to the object's bytes [dst, dst+size) in every "
      "reserved replica. Per key exactly sum(sizes), or negative: -600 no put session / "
      "fragment outside the object / rows of different lengths, -800 transfer failed (the "
      "session can then only be revoked: its end revokes it and returns -800)."),
    MCPY_M("batch_put_session_end", store_batch_put_session_end,
      "batch_put_session_end(keys: list[str]) -> list[int]: publishes each reserved object "
      "(put_end). 0, -600 no put session for the key in this object, -800 a ranged write of "
      "the session had failed (revoked instead), -704 the master discarded the "
      "reservation."),
    MCPY_M("batch_put_session_revoke", store_batch_put_session_revoke,
      "batch_put_session_revoke(keys: list[str]) -> list[int]: gives the reserved space "
      "back (put_revoke). 0, or -600 no put session for the key in this object."),
    {NULL, NULL, 0, NULL},
};
