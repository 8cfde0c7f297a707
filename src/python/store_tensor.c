/* store_tensor.c: the tensor API of MooncakeDistributedStore (put_tensor, get_tensor,
 * batch_*, pub_*, *_with_tp, *_tensor_into / *_tensor_from, upsert_*tensor*).
 *
 * A tensor object is upstream's [304-byte TensorMetadata][raw bytes]
 * (../shared/reference/upstream-mooncake.md §3; upstream store_py.cpp). Encoding and
 * decoding are done by the pure-Python codec `mooncake._tensor_codec` (imported, with
 * torch, on the first tensor call; without torch the call raises ImportError with an
 * install hint); the bytes move through the same C calls as the byte API, the header
 * and the tensor's own memory as two pieces of one object (no staging copy for CPU
 * tensors). Conventions, as upstream: writers return 0 / a negative code (a tensor the
 * codec refuses: unsupported dtype, > 8 dims, non-uniform TP split -> -600), readers
 * return a torch.Tensor or None (miss, bad header); batch forms one entry per key.
 * TP shards are stored under f"{key}_tp_{rank}" (tp_size > 1), all shards written by
 * every *_with_tp put. */
#include "store_py.h"

#include <stdio.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG "pystore"

static PyObject *codec_mod, *codec_error;

/* The codec module (new reference) or NULL with an exception. */
static PyObject *codec(void)
{
    if (!codec_mod) {
        PyObject *m = PyImport_ImportModule("mooncake._tensor_codec");
        if (!m)
            return NULL;
        PyObject *e = PyObject_GetAttrString(m, "TensorCodecError");
        if (!e) {
            Py_DECREF(m);
            return NULL;
        }
        codec_mod = m;
        codec_error = e;
    }
    return Py_NewRef(codec_mod);
}

/* Calls codec.<name>(*args). NULL with an exception on failure. */
static PyObject *codec_call(const char *name, const char *fmt, ...)
{
    PyObject *m = codec();
    if (!m)
        return NULL;
    PyObject *f = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    if (!f)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    PyObject *r = NULL;
    if (args) {
        if (!PyTuple_Check(args)) {
            PyObject *t = PyTuple_Pack(1, args);
            Py_DECREF(args);
            args = t;
        }
        if (args)
            r = PyObject_Call(f, args, NULL);
    }
    Py_XDECREF(args);
    Py_DECREF(f);
    return r;
}

/* After a failed codec call: a TensorCodecError (the tensor/buffer is refused) is logged
 * and cleared, returning 1; anything else (ImportError, ...) stays set, returning -1. */
static int codec_refused(const char *fn)
{
    if (codec_error && PyErr_ExceptionMatches(codec_error)) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *s = v ? PyObject_Str(v) : NULL;
        mc_log(MC_LOG_ERROR, TAG, "%s: %s", fn, s ? PyUnicode_AsUTF8(s) : "bad tensor");
        if (PyErr_Occurred())
            PyErr_Clear();
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return 1;
    }
    return -1;
}

/* key + "_tp_<rank>" as a new bytes object. */
static PyObject *tp_key(const mc_store_key *k, long rank)
{
    char suffix[32];
    int n = snprintf(suffix, sizeof(suffix), "_tp_%ld", rank);
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k->len + (size_t)n));
    if (!b)
        return NULL;
    memcpy(PyBytes_AS_STRING(b), k->data, k->len);
    memcpy(PyBytes_AS_STRING(b) + k->len, suffix, (size_t)n);
    return b;
}

/* ================================================================================== */
/* A batch of tensor objects to write: each is [header][payload], two iovs.            */
/* ================================================================================== */

typedef struct {
    PyObject *keep; /* list: codec results and key objects, alive until tb_clear */
    size_t n, cap;
    mc_store_key *keys;
    mc_store_iov *iov; /* 2 per object */
    const mc_store_iov **iovs;
    size_t *cnt;
    size_t *owner; /* caller's index (base key) of each object */
} tbatch;

static int tb_init(tbatch *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->keep = PyList_New(0);
    b->cap = cap ? cap : 1;
    b->keys = PyMem_Calloc(b->cap, sizeof(mc_store_key));
    b->iov = PyMem_Calloc(2 * b->cap, sizeof(mc_store_iov));
    b->iovs = PyMem_Calloc(b->cap, sizeof(mc_store_iov *));
    b->cnt = PyMem_Calloc(b->cap, sizeof(size_t));
    b->owner = PyMem_Calloc(b->cap, sizeof(size_t));
    if (!b->keep || !b->keys || !b->iov || !b->iovs || !b->cnt || !b->owner) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void tb_clear(tbatch *b)
{
    Py_CLEAR(b->keep);
    PyMem_Free(b->keys);
    PyMem_Free(b->iov);
    PyMem_Free(b->iovs);
    PyMem_Free(b->cnt);
    PyMem_Free(b->owner);
    memset(b, 0, sizeof(*b));
}

/* Adds the object `key` = [header][data_ptr, nbytes] from a codec serialize result
 * `ser` = (header: bytes, data_ptr: int, nbytes: int, owner). `keyobj` (may be NULL)
 * owns key's bytes. Steals nothing. Returns 0 or -1. */
static int tb_add(tbatch *b, mc_store_key key, PyObject *keyobj, PyObject *ser, size_t owner)
{
    if (b->n == b->cap) {
        PyErr_SetString(PyExc_RuntimeError, "tensor batch overflow");
        return -1;
    }
    if (!PyTuple_Check(ser) || PyTuple_GET_SIZE(ser) < 3 ||
        !PyBytes_Check(PyTuple_GET_ITEM(ser, 0))) {
        PyErr_SetString(PyExc_RuntimeError, "tensor codec returned an unexpected value");
        return -1;
    }
    uint64_t ptr, nbytes;
    if (mcpy_u64(PyTuple_GET_ITEM(ser, 1), "serialize", "data_ptr", &ptr) < 0 ||
        mcpy_u64(PyTuple_GET_ITEM(ser, 2), "serialize", "nbytes", &nbytes) < 0)
        return -1;
    if (PyList_Append(b->keep, ser) < 0 || (keyobj && PyList_Append(b->keep, keyobj) < 0))
        return -1;
    size_t i = b->n++;
    PyObject *hdr = PyTuple_GET_ITEM(ser, 0);
    b->keys[i] = key;
    b->iov[2 * i].base = PyBytes_AS_STRING(hdr);
    b->iov[2 * i].len = (uint64_t)PyBytes_GET_SIZE(hdr);
    b->iov[2 * i + 1].base = (void *)(uintptr_t)ptr;
    b->iov[2 * i + 1].len = nbytes;
    b->iovs[i] = &b->iov[2 * i];
    b->cnt[i] = nbytes ? 2 : 1;
    b->owner[i] = owner;
    return 0;
}

/* Adds every object put_tensor_with_tp(key, tensor, tp_size, split_dim) writes (the
 * tensor itself when tp_size <= 1). Returns 0, 1 (codec refused), -1. */
static int tb_add_tensor(tbatch *b, mc_store_key key, PyObject *tensor, long tp_size,
                         long split_dim, size_t owner, const char *fn)
{
    if (tp_size <= 1) {
        PyObject *ser = codec_call("serialize", "(O)", tensor);
        if (!ser)
            return codec_refused(fn);
        int r = tb_add(b, key, NULL, ser, owner);
        Py_DECREF(ser);
        return r;
    }
    size_t first = b->n;
    for (long r = 0; r < tp_size; r++) {
        PyObject *ser = codec_call("serialize_tp_shard", "(Olll)", tensor, r, tp_size,
                                   split_dim);
        if (!ser) {
            b->n = first; /* drop this tensor's shards (their refs stay in keep) */
            return codec_refused(fn);
        }
        PyObject *k = tp_key(&key, r);
        int rc = -1;
        if (k) {
            mc_store_key sk = {PyBytes_AS_STRING(k), (size_t)PyBytes_GET_SIZE(k)};
            rc = tb_add(b, sk, k, ser, owner);
        }
        Py_XDECREF(k);
        Py_DECREF(ser);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Writes the batch (GIL released); res[i] per object. */
static void tb_run(mcpy_store *self, tbatch *b, const mc_store_replicate_config *cfg,
                   bool upsert, int *res)
{
    if (!b->n)
        return;
    Py_BEGIN_ALLOW_THREADS
    if (upsert)
        mc_store_batch_upsert_from_multi_buffers(self->store, b->keys, b->n, b->iovs, b->cnt,
                                                 cfg, res);
    else
        mc_store_batch_put_from_multi_buffers(self->store, b->keys, b->n, b->iovs, b->cnt,
                                              cfg, res);
    Py_END_ALLOW_THREADS
}

/* Folds object results into per-owner results: the first non-zero code wins. */
static void tb_fold(const tbatch *b, const int *res, int *out)
{
    for (size_t i = 0; i < b->n; i++)
        if (out[b->owner[i]] == MC_OK && res[i] != MC_OK)
            out[b->owner[i]] = res[i];
}

/* ================================================================================== */
/* Writers                                                                             */
/* ================================================================================== */

static int parse_tp(PyObject *a_rank, PyObject *a_size, PyObject *a_dim, const char *fn,
                    long *rank, long *size, long *dim)
{
    long long v;
    *rank = 0;
    *size = 1;
    *dim = 0;
    if (a_rank) {
        if (mcpy_int(a_rank, fn, "tp_rank", INT32_MIN, INT32_MAX, &v) < 0)
            return -1;
        *rank = (long)v;
    }
    if (a_size) {
        if (mcpy_int(a_size, fn, "tp_size", INT32_MIN, INT32_MAX, &v) < 0)
            return -1;
        *size = (long)v;
    }
    if (a_dim) {
        if (mcpy_int(a_dim, fn, "split_dim", INT32_MIN, INT32_MAX, &v) < 0)
            return -1;
        *dim = (long)v;
    }
    return 0;
}

/* A tp_size a put can honour: at most MC_STORE_MAX_PARTS shards (a larger one could
 * never split a tensor uniformly anyway; refused before anything is allocated). */
static bool tp_size_ok(long tp_size, const char *fn)
{
    if (tp_size <= (long)MC_STORE_MAX_PARTS)
        return true;
    mc_log(MC_LOG_ERROR, TAG, "%s: tp_size %ld is too large", fn, tp_size);
    return false;
}

/* One tensor (put_tensor / pub_tensor / upsert_* / *_with_tp). */
static PyObject *put_one(mcpy_store *self, PyObject *a_key, PyObject *tensor, PyObject *a_cfg,
                         long tp_size, long split_dim, bool upsert, const char *fn)
{
    mc_store_key key;
    if (mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    mcpy_rc rc;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0)
        return NULL;
    if (!mc_store_is_setup(self->store) || !tp_size_ok(tp_size, fn)) {
        mcpy_rc_clear(&rc);
        return PyLong_FromLong(MC_INVALID_PARAMS);
    }
    tbatch b;
    PyObject *ret = NULL;
    int *res = NULL;
    int out = MC_OK;
    if (tb_init(&b, tp_size > 1 ? (size_t)tp_size : 1) < 0)
        goto done;
    int a = tb_add_tensor(&b, key, tensor, tp_size, split_dim, 0, fn);
    if (a < 0)
        goto done;
    if (a > 0) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto done;
    }
    res = PyMem_Calloc(b.n ? b.n : 1, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        goto done;
    }
    tb_run(self, &b, &rc.c, upsert, res);
    tb_fold(&b, res, &out);
    ret = PyLong_FromLong(out);
done:
    PyMem_Free(res);
    tb_clear(&b);
    mcpy_rc_clear(&rc);
    return ret;
}

/* A batch of tensors: List[int], one per key (all -600 on a length mismatch). */
static PyObject *put_many(mcpy_store *self, PyObject *a_keys, PyObject *a_tensors,
                          PyObject *a_cfg, long tp_size, long split_dim, bool upsert,
                          const char *fn)
{
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    PyObject *tensors = mcpy_seq_tuple(a_tensors, fn, "tensors_list");
    if (!tensors) {
        mcpy_keys_clear(&keys);
        return NULL;
    }
    mcpy_rc rc;
    if (mcpy_rc_from(a_cfg, fn, &rc) < 0) {
        Py_DECREF(tensors);
        mcpy_keys_clear(&keys);
        return NULL;
    }
    size_t n = keys.n;
    PyObject *ret = NULL;
    tbatch b;
    memset(&b, 0, sizeof(b));
    int *res = NULL, *out = NULL;
    if ((size_t)PyTuple_GET_SIZE(tensors) != n || !mc_store_is_setup(self->store) ||
        !tp_size_ok(tp_size, fn) || n * (tp_size > 1 ? (size_t)tp_size : 1) > MC_STORE_MAX_BATCH) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    size_t per = tp_size > 1 ? (size_t)tp_size : 1;
    out = PyMem_Calloc(n ? n : 1, sizeof(int));
    if (!out || tb_init(&b, n * per) < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        int a = tb_add_tensor(&b, keys.keys[i], PyTuple_GET_ITEM(tensors, (Py_ssize_t)i),
                              tp_size, split_dim, i, fn);
        if (a < 0)
            goto done;
        if (a > 0)
            out[i] = MC_INVALID_PARAMS;
    }
    res = PyMem_Calloc(b.n ? b.n : 1, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        goto done;
    }
    tb_run(self, &b, &rc.c, upsert, res);
    tb_fold(&b, res, out);
    ret = mcpy_int_list(out, n);
done:
    PyMem_Free(res);
    PyMem_Free(out);
    tb_clear(&b);
    mcpy_rc_clear(&rc);
    Py_DECREF(tensors);
    mcpy_keys_clear(&keys);
    return ret;
}

/* put_wrap: parses (key, tensor[, config]) or, when `many`, (keys, tensors_list[, config])
 * for method `fn`, then stores whole tensors (tp_size 1) through put_one / put_many. */
static PyObject *put_wrap(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                          bool many, bool with_cfg, bool upsert)
{
    char *kw[] = {many ? "keys" : "key", many ? "tensors_list" : "tensor",
                  with_cfg ? "config" : NULL, NULL};
    PyObject *k, *t, *c = NULL;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "OO%s:%s", with_cfg ? "|O" : "", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &k, &t, &c))
        return NULL;
    if (many)
        return put_many((mcpy_store *)o, k, t, c, 1, 0, upsert, fn);
    return put_one((mcpy_store *)o, k, t, c, 1, 0, upsert, fn);
}

static PyObject *t_put_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "put_tensor", false, false, false);
}

static PyObject *t_upsert_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "upsert_tensor", false, false, true);
}

static PyObject *t_pub_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "pub_tensor", false, true, false);
}

static PyObject *t_upsert_pub_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "upsert_pub_tensor", false, true, true);
}

static PyObject *t_batch_put_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "batch_put_tensor", true, false, false);
}

static PyObject *t_batch_upsert_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "batch_upsert_tensor", true, false, true);
}

static PyObject *t_batch_pub_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "batch_pub_tensor", true, true, false);
}

static PyObject *t_batch_upsert_pub_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    return put_wrap(o, args, kwds, "batch_upsert_pub_tensor", true, true, true);
}

static PyObject *t_put_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "tensor", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *t, *ar = NULL, *as = NULL, *ad = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOO:put_tensor_with_tp", kw, &k, &t, &ar,
                                     &as, &ad) ||
        parse_tp(ar, as, ad, "put_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return put_one((mcpy_store *)o, k, t, NULL, s, d, false, "put_tensor_with_tp");
}

static PyObject *t_pub_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "tensor", "config", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *t, *c = NULL, *ar = NULL, *as = NULL, *ad = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOOO:pub_tensor_with_tp", kw, &k, &t, &c,
                                     &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "pub_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return put_one((mcpy_store *)o, k, t, c, s, d, false, "pub_tensor_with_tp");
}

static PyObject *t_batch_put_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"base_keys", "tensors_list", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *t, *ar = NULL, *as = NULL, *ad = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOO:batch_put_tensor_with_tp", kw, &k, &t,
                                     &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "batch_put_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return put_many((mcpy_store *)o, k, t, NULL, s, d, false, "batch_put_tensor_with_tp");
}

static PyObject *t_batch_pub_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"base_keys", "tensors_list", "config", "tp_rank", "tp_size",
                         "split_dim", NULL};
    PyObject *k, *t, *c = NULL, *ar = NULL, *as = NULL, *ad = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOOO:batch_pub_tensor_with_tp", kw, &k,
                                     &t, &c, &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "batch_pub_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return put_many((mcpy_store *)o, k, t, c, s, d, false, "batch_pub_tensor_with_tp");
}

/* ---- writers from caller memory holding [header][data] ---- */

/* Validates the object at (ptr, size) with the codec. 0 valid, 1 refused, -1 error. */
static int check_object(uint64_t ptr, uint64_t size, const char *fn, PyObject **hdr_out)
{
    PyObject *h = codec_call("header_at", "(KK)", (unsigned long long)ptr,
                             (unsigned long long)size);
    if (!h)
        return codec_refused(fn);
    if (hdr_out)
        *hdr_out = h;
    else
        Py_DECREF(h);
    return 0;
}

/* Adds the objects for the tensor object at (ptr, size) under key: as is when tp_size <=
 * 1 or when it already is TP shard `tp_rank` of tp_size (stored under key_tp_<rank>);
 * a FULL object with tp_size > 1 is split into every shard (upstream
 * put_tensor_with_tp_from). 0, 1 (refused), -1. */
static int tb_add_from(tbatch *b, mc_store_key key, uint64_t ptr, uint64_t size, long tp_rank,
                       long tp_size, long split_dim, size_t owner, const char *fn)
{
    PyObject *hdr = NULL;
    int c = check_object(ptr, size, fn, &hdr);
    if (c)
        return c;
    int ret = -1;
    PyObject *ser = NULL, *k = NULL, *view = NULL;
    PyObject *layout = PyObject_GetAttrString(hdr, "layout_kind");
    if (!layout)
        goto out;
    long kind = PyLong_AsLong(layout);
    Py_DECREF(layout);
    if (kind == -1 && PyErr_Occurred())
        goto out;
    if (tp_size <= 1 || kind == 1) {
        /* the caller's bytes as they are: one piece */
        ser = Py_BuildValue("(y#KK)", "", (Py_ssize_t)0, (unsigned long long)ptr,
                            (unsigned long long)size);
        if (!ser)
            goto out;
        mc_store_key sk = key;
        if (tp_size > 1) {
            if (tp_rank < 0 || tp_rank >= tp_size) {
                mc_log(MC_LOG_ERROR, TAG, "%s: tp_rank %ld outside 0..%ld", fn, tp_rank,
                       tp_size - 1);
                ret = 1;
                goto out;
            }
            k = tp_key(&key, tp_rank);
            if (!k)
                goto out;
            sk.data = PyBytes_AS_STRING(k);
            sk.len = (size_t)PyBytes_GET_SIZE(k);
        }
        if (tb_add(b, sk, k, ser, owner) < 0)
            goto out;
        /* the header piece is empty: keep only the payload iov */
        size_t i = b->n - 1;
        b->iov[2 * i] = b->iov[2 * i + 1];
        b->cnt[i] = 1;
        ret = 0;
        goto out;
    }
    view = codec_call("view_at", "(KK)", (unsigned long long)ptr, (unsigned long long)size);
    if (!view) {
        ret = codec_refused(fn);
        goto out;
    }
    ret = tb_add_tensor(b, key, view, tp_size, split_dim, owner, fn);
out:
    Py_XDECREF(hdr);
    Py_XDECREF(ser);
    Py_XDECREF(k);
    Py_XDECREF(view);
    return ret;
}

static PyObject *from_one(PyObject *o, PyObject *a_key, PyObject *a_ptr, PyObject *a_size,
                          long tp_rank, long tp_size, long split_dim, bool upsert,
                          const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mc_store_key key;
    uint64_t ptr, size;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    if (!mc_store_is_setup(self->store) || !tp_size_ok(tp_size, fn))
        return PyLong_FromLong(MC_INVALID_PARAMS);
    tbatch b;
    PyObject *ret = NULL;
    int *res = NULL, out = MC_OK;
    if (tb_init(&b, tp_size > 1 ? (size_t)tp_size : 1) < 0)
        goto done;
    int a = tb_add_from(&b, key, ptr, size, tp_rank, tp_size, split_dim, 0, fn);
    if (a < 0)
        goto done;
    if (a > 0) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto done;
    }
    res = PyMem_Calloc(b.n ? b.n : 1, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        goto done;
    }
    tb_run(self, &b, NULL, upsert, res);
    tb_fold(&b, res, &out);
    ret = PyLong_FromLong(out);
done:
    PyMem_Free(res);
    tb_clear(&b);
    return ret;
}

/* Batch forms: any invalid buffer, a length mismatch or not set up -> all -600 (as
 * upstream batch_put_tensor_from). */
static PyObject *from_many(PyObject *o, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                           long tp_rank, long tp_size, long split_dim, bool upsert,
                           const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    PyObject *ret = NULL;
    int *res = NULL, *out = NULL;
    tbatch b;
    memset(&b, 0, sizeof(b));
    if (mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    size_t n = keys.n;
    if (np != n || ns != n || !mc_store_is_setup(self->store) || !tp_size_ok(tp_size, fn) ||
        n * (tp_size > 1 ? (size_t)tp_size : 1) > MC_STORE_MAX_BATCH) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    size_t per = tp_size > 1 ? (size_t)tp_size : 1;
    out = PyMem_Calloc(n ? n : 1, sizeof(int));
    if (!out || tb_init(&b, n * per) < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        int a = tb_add_from(&b, keys.keys[i], ptrs[i], sizes[i], tp_rank, tp_size, split_dim,
                            i, fn);
        if (a < 0)
            goto done;
        if (a > 0) {
            ret = mcpy_code_list(MC_INVALID_PARAMS, n);
            goto done;
        }
    }
    res = PyMem_Calloc(b.n ? b.n : 1, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        goto done;
    }
    tb_run(self, &b, NULL, upsert, res);
    tb_fold(&b, res, out);
    ret = mcpy_int_list(out, n);
done:
    PyMem_Free(res);
    PyMem_Free(out);
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    tb_clear(&b);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *t_put_tensor_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:put_tensor_from", kw, &k, &p, &s))
        return NULL;
    return from_one(o, k, p, s, 0, 1, 0, false, "put_tensor_from");
}

static PyObject *t_upsert_tensor_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:upsert_tensor_from", kw, &k, &p, &s))
        return NULL;
    return from_one(o, k, p, s, 0, 1, 0, true, "upsert_tensor_from");
}

static PyObject *t_batch_put_tensor_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", "buffer_ptrs", "sizes", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:batch_put_tensor_from", kw, &k, &p, &s))
        return NULL;
    return from_many(o, k, p, s, 0, 1, 0, false, "batch_put_tensor_from");
}

static PyObject *t_batch_upsert_tensor_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", "buffer_ptrs", "sizes", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:batch_upsert_tensor_from", kw, &k, &p,
                                     &s))
        return NULL;
    return from_many(o, k, p, s, 0, 1, 0, true, "batch_upsert_tensor_from");
}

static PyObject *t_put_tensor_with_tp_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "buffer_ptr", "size", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *p, *s, *ar = NULL, *as = NULL, *ad = NULL;
    long r, n, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OOO:put_tensor_with_tp_from", kw, &k, &p,
                                     &s, &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "put_tensor_with_tp_from", &r, &n, &d) < 0)
        return NULL;
    return from_one(o, k, p, s, r, n, d, false, "put_tensor_with_tp_from");
}

static PyObject *t_batch_put_tensor_with_tp_from(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"base_keys", "buffer_ptrs", "sizes", "tp_rank", "tp_size",
                         "split_dim", NULL};
    PyObject *k, *p, *s, *ar = NULL, *as = NULL, *ad = NULL;
    long r, n, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OOO:batch_put_tensor_with_tp_from", kw,
                                     &k, &p, &s, &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "batch_put_tensor_with_tp_from", &r, &n, &d) < 0)
        return NULL;
    return from_many(o, k, p, s, r, n, d, false, "batch_put_tensor_with_tp_from");
}

/* ================================================================================== */
/* Readers                                                                             */
/* ================================================================================== */

/* The key a TP read uses: key itself (tp_size <= 1) or key_tp_<rank> (new bytes in
 * *holder). Returns 0, 1 (bad rank: the read misses), -1. */
static int read_key(mc_store_key *key, long rank, long size, PyObject **holder)
{
    *holder = NULL;
    if (size <= 1)
        return 0;
    if (rank < 0 || rank >= size)
        return 1;
    *holder = tp_key(key, rank);
    if (!*holder)
        return -1;
    key->data = PyBytes_AS_STRING(*holder);
    key->len = (size_t)PyBytes_GET_SIZE(*holder);
    return 0;
}

/* A tensor decoded from a handle, or None (bad object). NULL on other errors. */
static PyObject *decode_handle(PyObject *handle, const char *fn)
{
    PyObject *t = codec_call("decode", "(O)", handle);
    if (t)
        return t;
    if (codec_refused(fn) > 0)
        Py_RETURN_NONE;
    return NULL;
}

static PyObject *get_one(PyObject *o, PyObject *a_key, long rank, long size, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mc_store_key key;
    PyObject *holder;
    if (mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    PyObject *m = codec(); /* ImportError without torch, even on a miss */
    if (!m)
        return NULL;
    Py_DECREF(m);
    int k = read_key(&key, rank, size, &holder);
    if (k < 0)
        return NULL;
    if (k > 0)
        Py_RETURN_NONE;
    mc_store_buffer *b = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_buffer(self->store, key.data, key.len, &b);
    Py_END_ALLOW_THREADS
    Py_XDECREF(holder);
    if (r != MC_OK || !b) {
        mc_store_buffer_free(b);
        Py_RETURN_NONE;
    }
    PyObject *h = mcpy_buffer_handle_new(b);
    if (!h)
        return NULL;
    PyObject *t = decode_handle(h, fn);
    Py_DECREF(h);
    return t;
}

static PyObject *get_many(PyObject *o, PyObject *a_keys, long rank, long size, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_keys keys;
    if (mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    PyObject *m = codec();
    if (!m) {
        mcpy_keys_clear(&keys);
        return NULL;
    }
    Py_DECREF(m);
    size_t n = keys.n;
    PyObject *holders = PyList_New(0), *ret = NULL;
    mc_store_buffer **outs = PyMem_Calloc(n ? n : 1, sizeof(*outs));
    int64_t *res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    bool *skip = PyMem_Calloc(n ? n : 1, sizeof(bool));
    if (!holders || !outs || !res || !skip) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *h;
        int k = read_key(&keys.keys[i], rank, size, &h);
        if (k < 0)
            goto done;
        if (k > 0) {
            skip[i] = true;
            keys.keys[i].len = 0; /* an empty key: the C call refuses it (a miss) */
        }
        if (h) {
            int e = PyList_Append(holders, h);
            Py_DECREF(h);
            if (e < 0)
                goto done;
        }
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_buffer(self->store, keys.keys, n, outs, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *t;
        if (skip[i] || res[i] < 0 || !outs[i]) {
            t = Py_NewRef(Py_None);
        } else {
            PyObject *h = mcpy_buffer_handle_new(outs[i]);
            outs[i] = NULL;
            t = h ? decode_handle(h, fn) : NULL;
            Py_XDECREF(h);
            if (!t) {
                Py_CLEAR(ret);
                goto done;
            }
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, t);
    }
done:
    if (outs)
        for (size_t i = 0; i < n; i++)
            mc_store_buffer_free(outs[i]);
    PyMem_Free(outs);
    PyMem_Free(res);
    PyMem_Free(skip);
    Py_XDECREF(holders);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *t_get_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", NULL};
    PyObject *k;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_tensor", kw, &k))
        return NULL;
    return get_one(o, k, 0, 1, "get_tensor");
}

static PyObject *t_batch_get_tensor(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", NULL};
    PyObject *k;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_get_tensor", kw, &k))
        return NULL;
    return get_many(o, k, 0, 1, "batch_get_tensor");
}

static PyObject *t_get_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *ar = NULL, *as = NULL, *ad = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO:get_tensor_with_tp", kw, &k, &ar, &as,
                                     &ad) ||
        parse_tp(ar, as, ad, "get_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return get_one(o, k, r, s, "get_tensor_with_tp");
}

static PyObject *t_batch_get_tensor_with_tp(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"base_keys", "tp_rank", "tp_size", NULL};
    PyObject *k, *ar = NULL, *as = NULL;
    long r, s, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:batch_get_tensor_with_tp", kw, &k, &ar,
                                     &as) ||
        parse_tp(ar, as, NULL, "batch_get_tensor_with_tp", &r, &s, &d) < 0)
        return NULL;
    return get_many(o, k, r, s, "batch_get_tensor_with_tp");
}

/* A zero-copy tensor over the object just read into caller memory, or None. */
static PyObject *view_result(uint64_t ptr, int64_t n, const char *fn)
{
    if (n < 0)
        Py_RETURN_NONE;
    PyObject *t = codec_call("view_at", "(KL)", (unsigned long long)ptr, (long long)n);
    if (t)
        return t;
    if (codec_refused(fn) > 0)
        Py_RETURN_NONE;
    return NULL;
}

static PyObject *into_one(PyObject *o, PyObject *a_key, PyObject *a_ptr, PyObject *a_size,
                          long rank, long tsize, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mc_store_key key;
    uint64_t ptr, size;
    PyObject *holder;
    if (mcpy_key(a_key, fn, "key", &key) < 0 || mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    PyObject *m = codec();
    if (!m)
        return NULL;
    Py_DECREF(m);
    int k = read_key(&key, rank, tsize, &holder);
    if (k < 0)
        return NULL;
    if (k > 0 || (ptr == 0 && size) || ptr + size < ptr) {
        Py_XDECREF(holder);
        Py_RETURN_NONE;
    }
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = mc_store_get_into(self->store, key.data, key.len, (void *)(uintptr_t)ptr, size);
    Py_END_ALLOW_THREADS
    Py_XDECREF(holder);
    return view_result(ptr, n, fn);
}

static PyObject *into_many(PyObject *o, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                           long rank, long tsize, const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    int64_t *res = NULL;
    PyObject *ret = NULL, *holders = NULL;
    if (mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    size_t n = keys.n;
    if (np != n || ns != n || !mc_store_is_setup(self->store)) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    PyObject *m = codec();
    if (!m)
        goto done;
    Py_DECREF(m);
    holders = PyList_New(0);
    res = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!holders || !res) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *h;
        int k = read_key(&keys.keys[i], rank, tsize, &h);
        if (k < 0)
            goto done;
        if (k > 0)
            keys.keys[i].len = 0; /* refused by the C call: a miss */
        if (h) {
            int e = PyList_Append(holders, h);
            Py_DECREF(h);
            if (e < 0)
                goto done;
        }
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_into(self->store, keys.keys, n, (void *const *)ptrs, sizes, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New((Py_ssize_t)n);
    if (!ret)
        goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = view_result(ptrs[i], res[i], fn);
        if (!t) {
            Py_CLEAR(ret);
            goto done;
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, t);
    }
done:
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    Py_XDECREF(holders);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *t_get_tensor_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:get_tensor_into", kw, &k, &p, &s))
        return NULL;
    return into_one(o, k, p, s, 0, 1, "get_tensor_into");
}

static PyObject *t_batch_get_tensor_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", "buffer_ptrs", "sizes", NULL};
    PyObject *k, *p, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:batch_get_tensor_into", kw, &k, &p, &s))
        return NULL;
    return into_many(o, k, p, s, 0, 1, "batch_get_tensor_into");
}

static PyObject *t_get_tensor_with_tp_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "buffer_ptr", "size", "tp_rank", "tp_size", "split_dim", NULL};
    PyObject *k, *p, *s, *ar = NULL, *as = NULL, *ad = NULL;
    long r, n, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OOO:get_tensor_with_tp_into", kw, &k, &p,
                                     &s, &ar, &as, &ad) ||
        parse_tp(ar, as, ad, "get_tensor_with_tp_into", &r, &n, &d) < 0)
        return NULL;
    return into_one(o, k, p, s, r, n, "get_tensor_with_tp_into");
}

static PyObject *t_batch_get_tensor_with_tp_into(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"base_keys", "buffer_ptrs", "sizes", "tp_rank", "tp_size", NULL};
    PyObject *k, *p, *s, *ar = NULL, *as = NULL;
    long r, n, d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OO:batch_get_tensor_with_tp_into", kw,
                                     &k, &p, &s, &ar, &as) ||
        parse_tp(ar, as, NULL, "batch_get_tensor_with_tp_into", &r, &n, &d) < 0)
        return NULL;
    return into_many(o, k, p, s, r, n, "batch_get_tensor_with_tp_into");
}

/* ================================================================================== */
/* Tables                                                                              */
/* ================================================================================== */

#define KW (METH_VARARGS | METH_KEYWORDS)
#define M(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, KW, doc}

PyMethodDef mcpy_tensor_methods[] = {
    M("put_tensor", t_put_tensor,
      "put_tensor(key, tensor) -> int: stores a torch tensor as [304-byte header][bytes] "
      "(CPU copy if needed, contiguous). 0, -600 for an unsupported tensor, else as put. "
      "ImportError without torch."),
    M("get_tensor", t_get_tensor,
      "get_tensor(key) -> torch.Tensor | None: None on a miss or a bad object."),
    M("batch_put_tensor", t_batch_put_tensor,
      "batch_put_tensor(keys, tensors_list) -> list[int] (all -600 on a length mismatch)."),
    M("batch_get_tensor", t_batch_get_tensor,
      "batch_get_tensor(keys) -> list[torch.Tensor | None]."),
    M("pub_tensor", t_pub_tensor,
      "pub_tensor(key, tensor, config=ReplicateConfig()) -> int: put_tensor with a "
      "config."),
    M("batch_pub_tensor", t_batch_pub_tensor,
      "batch_pub_tensor(keys, tensors_list, config=ReplicateConfig()) -> list[int]."),
    M("put_tensor_with_tp", t_put_tensor_with_tp,
      "put_tensor_with_tp(key, tensor, tp_rank=0, tp_size=1, split_dim=0) -> int: "
      "tp_size <= 1 is put_tensor; else every one of the tp_size uniform shards along "
      "split_dim is stored under f'{key}_tp_{rank}' (non-uniform split: -600). 0 or the "
      "first failing shard's code."),
    M("pub_tensor_with_tp", t_pub_tensor_with_tp,
      "pub_tensor_with_tp(key, tensor, config=ReplicateConfig(), tp_rank=0, tp_size=1, "
      "split_dim=0) -> int."),
    M("batch_put_tensor_with_tp", t_batch_put_tensor_with_tp,
      "batch_put_tensor_with_tp(base_keys, tensors_list, tp_rank=0, tp_size=1, "
      "split_dim=0) -> list[int]."),
    M("batch_pub_tensor_with_tp", t_batch_pub_tensor_with_tp,
      "batch_pub_tensor_with_tp(base_keys, tensors_list, config=ReplicateConfig(), "
      "tp_rank=0, tp_size=1, split_dim=0) -> list[int]."),
    M("get_tensor_with_tp", t_get_tensor_with_tp,
      "get_tensor_with_tp(key, tp_rank=0, tp_size=1, split_dim=0) -> torch.Tensor | None: "
      "shard tp_rank (key itself when tp_size <= 1)."),
    M("batch_get_tensor_with_tp", t_batch_get_tensor_with_tp,
      "batch_get_tensor_with_tp(base_keys, tp_rank=0, tp_size=1) -> list."),
    M("get_tensor_into", t_get_tensor_into,
      "get_tensor_into(key, buffer_ptr, size) -> torch.Tensor | None: reads the object "
      "into the caller's buffer and returns a tensor viewing it (no copy)."),
    M("batch_get_tensor_into", t_batch_get_tensor_into,
      "batch_get_tensor_into(keys, buffer_ptrs, sizes) -> list: tensor or None per key; "
      "a list of -600 when not set up or the lists differ in length."),
    M("get_tensor_with_tp_into", t_get_tensor_with_tp_into,
      "get_tensor_with_tp_into(key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0)."),
    M("batch_get_tensor_with_tp_into", t_batch_get_tensor_with_tp_into,
      "batch_get_tensor_with_tp_into(base_keys, buffer_ptrs, sizes, tp_rank=0, "
      "tp_size=1) -> list."),
    M("put_tensor_from", t_put_tensor_from,
      "put_tensor_from(key, buffer_ptr, size) -> int: stores the caller's "
      "[header][data] bytes after validating the header (-600 when invalid)."),
    M("batch_put_tensor_from", t_batch_put_tensor_from,
      "batch_put_tensor_from(keys, buffer_ptrs, sizes) -> list[int]: all -600 when any "
      "buffer is invalid."),
    M("put_tensor_with_tp_from", t_put_tensor_with_tp_from,
      "put_tensor_with_tp_from(key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0) "
      "-> int: a full tensor object is split into every shard; a shard object is stored "
      "as shard tp_rank."),
    M("batch_put_tensor_with_tp_from", t_batch_put_tensor_with_tp_from,
      "batch_put_tensor_with_tp_from(base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1, "
      "split_dim=0) -> list[int]."),
    M("upsert_tensor", t_upsert_tensor, "upsert_tensor(key, tensor) -> int."),
    M("upsert_tensor_from", t_upsert_tensor_from,
      "upsert_tensor_from(key, buffer_ptr, size) -> int."),
    M("batch_upsert_tensor_from", t_batch_upsert_tensor_from,
      "batch_upsert_tensor_from(keys, buffer_ptrs, sizes) -> list[int]."),
    M("batch_upsert_tensor", t_batch_upsert_tensor,
      "batch_upsert_tensor(keys, tensors_list) -> list[int]."),
    M("upsert_pub_tensor", t_upsert_pub_tensor,
      "upsert_pub_tensor(key, tensor, config=ReplicateConfig()) -> int."),
    M("batch_upsert_pub_tensor", t_batch_upsert_pub_tensor,
      "batch_upsert_pub_tensor(keys, tensors_list, config=ReplicateConfig()) -> list[int]."),
    {NULL, NULL, 0, NULL},
};

/* ---- module functions ---- */

static PyObject *m_serialize_tensor(PyObject *m, PyObject *t)
{
    (void)m;
    return codec_call("serialize", "(O)", t);
}

static PyObject *m_tensor_metadata_size(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyLong_FromLong(304);
}

static PyObject *m_deserialize_tensor(PyObject *m, PyObject *payload)
{
    (void)m;
    return codec_call("decode", "(O)", payload);
}

PyMethodDef mcpy_tensor_module_funcs[] = {
    {"_serialize_tensor", m_serialize_tensor, METH_O,
     "_serialize_tensor(t) -> (metadata: bytes, data_ptr: int, nbytes: int, owner)."},
    {"_tensor_metadata_size", m_tensor_metadata_size, METH_NOARGS,
     "_tensor_metadata_size() -> 304."},
    {"_deserialize_tensor", m_deserialize_tensor, METH_O,
     "_deserialize_tensor(payload: bytes) -> torch.Tensor (ValueError for a bad object)."},
    {NULL, NULL, 0, NULL},
};
