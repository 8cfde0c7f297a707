/* store_tensor_put.c: the tensor writers of MooncakeDistributedStore: put_tensor,
 * pub_tensor, the batch_* and *_with_tp forms, put_tensor_from (caller memory holding
 * [header][data]) and the upsert_* twins. Objects go through the write batch of
 * store_tensor.c; conventions (0 / negative code, one per key) as store_tensor.c says. */
#include "store_py.h"

#include <stdio.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

/* ---- the writers' shared steps ---- */

/* A batch of n keys, each split tp_size ways, that the store may take: set up, a good
 * tp_size (logged when not), at most MC_STORE_MAX_BATCH objects in all. */
static bool many_ok(mcpy_store *self, size_t n, long tp_size, const char *fn)
{
    return mc_store_is_setup(self->store) && mcpy_tp_size_ok(tp_size, fn) &&
           n * (tp_size > 1 ? (size_t)tp_size : 1) <= MC_STORE_MAX_BATCH;
}

/* *out = n zeroed results and b ready for n * (tp_size or 1) objects: 0, or -1 with a
 * Python exception set (what is allocated is freed by the caller as usual). */
static int many_begin(mcpy_tbatch *b, size_t n, long tp_size, int **out)
{
    size_t per = tp_size > 1 ? (size_t)tp_size : 1;
    *out = PyMem_Calloc(n ? n : 1, sizeof(int));
    if (!*out || mcpy_tb_init(b, n * per) < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Writes b's objects (cfg NULL: the default config) and folds their results into out[]
 * (one per key, as mcpy_tb_fold). 0, or -1 with an exception set (no memory). */
static int run_fold(mcpy_store *self, mcpy_tbatch *b, const mc_store_replicate_config *cfg,
                    bool upsert, int *out)
{
    int *res = PyMem_Calloc(b->n ? b->n : 1, sizeof(int));
    if (!res) {
        PyErr_NoMemory();
        return -1;
    }
    mcpy_tb_run(self, b, cfg, upsert, res);
    mcpy_tb_fold(b, res, out);
    PyMem_Free(res);
    return 0;
}

/* One tensor (put_tensor / pub_tensor / upsert_* / *_with_tp). */
static PyObject *put_one(mcpy_store *self, PyObject *a_key, PyObject *tensor, PyObject *a_cfg,
                         long tp_size, long split_dim, bool upsert, const char *fn)
{
    mcpy_state *st = mcpy_state_of((PyObject *)self);
    mc_store_key key;
    if (!st || mcpy_key(a_key, fn, "key", &key) < 0)
        return NULL;
    mcpy_rc rc;
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0)
        return NULL;
    if (!mc_store_is_setup(self->store) || !mcpy_tp_size_ok(tp_size, fn)) {
        mcpy_rc_clear(&rc);
        return PyLong_FromLong(MC_INVALID_PARAMS);
    }
    mcpy_tbatch b;
    PyObject *ret = NULL;
    int out = MC_OK;
    if (mcpy_tb_init(&b, tp_size > 1 ? (size_t)tp_size : 1) < 0)
        goto done;
    int a = mcpy_tb_add_tensor(st, &b, key, tensor, tp_size, split_dim, 0, fn);
    if (a < 0)
        goto done;
    if (a > 0) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto done;
    }
    if (run_fold(self, &b, &rc.c, upsert, &out) == 0)
        ret = PyLong_FromLong(out);
done:
    mcpy_tb_clear(&b);
    mcpy_rc_clear(&rc);
    return ret;
}

/* A batch of tensors: List[int], one per key (all -600 on a length mismatch). */
static PyObject *put_many(mcpy_store *self, PyObject *a_keys, PyObject *a_tensors,
                          PyObject *a_cfg, long tp_size, long split_dim, bool upsert,
                          const char *fn)
{
    mcpy_state *st = mcpy_state_of((PyObject *)self);
    mcpy_keys keys;
    if (!st || mcpy_keys_from(a_keys, fn, "keys", &keys) < 0)
        return NULL;
    PyObject *tensors = mcpy_seq_tuple(a_tensors, fn, "tensors_list");
    if (!tensors) {
        mcpy_keys_clear(&keys);
        return NULL;
    }
    mcpy_rc rc;
    if (mcpy_rc_from(st, a_cfg, fn, &rc) < 0) {
        Py_DECREF(tensors);
        mcpy_keys_clear(&keys);
        return NULL;
    }
    size_t n = keys.n;
    PyObject *ret = NULL;
    mcpy_tbatch b;
    memset(&b, 0, sizeof(b));
    int *out = NULL;
    if ((size_t)PyTuple_GET_SIZE(tensors) != n || !many_ok(self, n, tp_size, fn)) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    if (many_begin(&b, n, tp_size, &out) < 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        /* a refused tensor fails its own key only; the others are still written */
        int a = mcpy_tb_add_tensor(st, &b, keys.keys[i], PyTuple_GET_ITEM(tensors, (Py_ssize_t)i),
                              tp_size, split_dim, i, fn);
        if (a < 0)
            goto done;
        if (a > 0)
            out[i] = MC_INVALID_PARAMS;
    }
    if (run_fold(self, &b, &rc.c, upsert, out) == 0)
        ret = mcpy_int_list(out, n);
done:
    PyMem_Free(out);
    mcpy_tb_clear(&b);
    mcpy_rc_clear(&rc);
    Py_DECREF(tensors);
    mcpy_keys_clear(&keys);
    return ret;
}

/* ================================================================================== */
/* Writers from caller memory holding [header][data]                                   */
/* ================================================================================== */

/* Validates the object at (ptr, size) with the codec. 0 valid, 1 refused, -1 error. */
static int check_object(mcpy_state *st, uint64_t ptr, uint64_t size, const char *fn, PyObject **hdr_out)
{
    PyObject *h = mcpy_codec_call(st, "header_at", "(KK)", (unsigned long long)ptr,
                             (unsigned long long)size);
    if (!h)
        return mcpy_codec_refused(st, fn);
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
static int tb_add_from(mcpy_state *st, mcpy_tbatch *b, mc_store_key key, uint64_t ptr, uint64_t size, long tp_rank,
                       long tp_size, long split_dim, size_t owner, const char *fn)
{
    PyObject *hdr = NULL;
    int c = check_object(st, ptr, size, fn, &hdr);
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
            k = mcpy_tp_key(&key, tp_rank);
            if (!k)
                goto out;
            sk.data = PyBytes_AS_STRING(k);
            sk.len = (size_t)PyBytes_GET_SIZE(k);
        }
        if (mcpy_tb_add(b, sk, k, ser, owner) < 0)
            goto out;
        /* the header piece is empty: keep only the payload iov */
        size_t i = b->n - 1;
        b->iov[2 * i] = b->iov[2 * i + 1];
        b->cnt[i] = 1;
        ret = 0;
        goto out;
    }
    view = mcpy_codec_call(st, "view_at", "(KK)", (unsigned long long)ptr, (unsigned long long)size);
    if (!view) {
        ret = mcpy_codec_refused(st, fn);
        goto out;
    }
    ret = mcpy_tb_add_tensor(st, b, key, view, tp_size, split_dim, owner, fn);
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
    mcpy_state *st = mcpy_state_of(o);
    mc_store_key key;
    uint64_t ptr, size;
    if (!st || mcpy_key(a_key, fn, "key", &key) < 0 ||
        mcpy_u64(a_ptr, fn, "buffer_ptr", &ptr) < 0 || mcpy_u64(a_size, fn, "size", &size) < 0)
        return NULL;
    if (!mc_store_is_setup(self->store) || !mcpy_tp_size_ok(tp_size, fn))
        return PyLong_FromLong(MC_INVALID_PARAMS);
    mcpy_tbatch b;
    PyObject *ret = NULL;
    int out = MC_OK;
    if (mcpy_tb_init(&b, tp_size > 1 ? (size_t)tp_size : 1) < 0)
        goto done;
    int a = tb_add_from(st, &b, key, ptr, size, tp_rank, tp_size, split_dim, 0, fn);
    if (a < 0)
        goto done;
    if (a > 0) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto done;
    }
    if (run_fold(self, &b, NULL, upsert, &out) == 0)
        ret = PyLong_FromLong(out);
done:
    mcpy_tb_clear(&b);
    return ret;
}

/* Batch forms: any invalid buffer, a length mismatch or not set up -> all -600 (as
 * upstream batch_put_tensor_from). */
static PyObject *from_many(PyObject *o, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                           long tp_rank, long tp_size, long split_dim, bool upsert,
                           const char *fn)
{
    mcpy_store *self = (mcpy_store *)o;
    mcpy_state *st = mcpy_state_of(o);
    mcpy_keys keys;
    uint64_t *ptrs = NULL, *sizes = NULL;
    size_t np = 0, ns = 0;
    PyObject *ret = NULL;
    int *out = NULL;
    mcpy_tbatch b;
    memset(&b, 0, sizeof(b));
    if (!st || mcpy_keys_ptrs_sizes(a_keys, a_ptrs, a_sizes, fn, &keys, &ptrs, &sizes, &np, &ns) < 0)
        return NULL;
    size_t n = keys.n;
    if (np != n || ns != n || !many_ok(self, n, tp_size, fn)) {
        ret = mcpy_code_list(MC_INVALID_PARAMS, n);
        goto done;
    }
    if (many_begin(&b, n, tp_size, &out) < 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        int a = tb_add_from(st, &b, keys.keys[i], ptrs[i], sizes[i], tp_rank, tp_size, split_dim,
                            i, fn);
        if (a < 0)
            goto done;
        if (a > 0) {
            ret = mcpy_code_list(MC_INVALID_PARAMS, n);
            goto done;
        }
    }
    if (run_fold(self, &b, NULL, upsert, out) == 0)
        ret = mcpy_int_list(out, n);
done:
    PyMem_Free(out);
    PyMem_Free(ptrs);
    PyMem_Free(sizes);
    mcpy_tb_clear(&b);
    mcpy_keys_clear(&keys);
    return ret;
}

/* ---- the methods: one row per Python method (name, argument flags, upsert) ----
 * Every writer takes its arguments through mcpy_tensor_args and goes to put_one /
 * put_many (tensor objects) or from_one / from_many (caller memory, MCPY_T_BUF). */
#define V MCPY_T_VAL
#define B MCPY_T_BUF
#define M MCPY_T_MANY
#define C MCPY_T_CFG
#define TP (MCPY_T_TP | MCPY_T_DIM)
#define MCPY_TENSOR_PUT_TABLE(X)                                                           \
    X(put_tensor, V, false)                                                                \
    X(upsert_tensor, V, true)                                                              \
    X(pub_tensor, V | C, false)                                                            \
    X(upsert_pub_tensor, V | C, true)                                                      \
    X(batch_put_tensor, M | V, false)                                                      \
    X(batch_upsert_tensor, M | V, true)                                                    \
    X(batch_pub_tensor, M | V | C, false)                                                  \
    X(batch_upsert_pub_tensor, M | V | C, true)                                            \
    X(put_tensor_with_tp, V | TP, false)                                                   \
    X(pub_tensor_with_tp, V | C | TP, false)                                               \
    X(batch_put_tensor_with_tp, M | V | TP, false)                                         \
    X(batch_pub_tensor_with_tp, M | V | C | TP, false)                                     \
    X(put_tensor_from, B, false)                                                           \
    X(upsert_tensor_from, B, true)                                                         \
    X(batch_put_tensor_from, M | B, false)                                                 \
    X(batch_upsert_tensor_from, M | B, true)                                               \
    X(put_tensor_with_tp_from, B | TP, false)                                              \
    X(batch_put_tensor_with_tp_from, M | B | TP, false)

static PyObject *put_method(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                            unsigned flags, bool upsert)
{
    mcpy_targs a;
    if (mcpy_tensor_args(args, kwds, fn, flags, &a) < 0)
        return NULL;
    bool many = flags & MCPY_T_MANY;
    if (flags & MCPY_T_BUF)
        return (many ? from_many : from_one)(o, a.key, a.ptr, a.size, a.tp_rank, a.tp_size,
                                             a.split_dim, upsert, fn);
    return (many ? put_many : put_one)((mcpy_store *)o, a.key, a.val, a.cfg, a.tp_size,
                                       a.split_dim, upsert, fn);
}

#define MCPY__PUT(NAME, FLAGS, UPSERT)                                                     \
    static PyObject *t_##NAME(PyObject *o, PyObject *a, PyObject *k)                       \
    {                                                                                      \
        return put_method(o, a, k, #NAME, FLAGS, UPSERT);                                  \
    }
MCPY_TENSOR_PUT_TABLE(MCPY__PUT)
#undef MCPY__PUT
#undef V
#undef B
#undef M
#undef C
#undef TP

PyMethodDef mcpy_tensor_put_methods[] = {
    MCPY_M("put_tensor", t_put_tensor,
      "put_tensor(key, tensor) -> int: stores a torch tensor as [304-byte header][bytes] "
      "(CPU copy if needed, contiguous). 0, -600 for an unsupported tensor, else as put. "
      "ImportError without torch."),
    MCPY_M("batch_put_tensor", t_batch_put_tensor,
      "batch_put_tensor(keys, tensors_list) -> list[int] (all -600 on a length mismatch)."),
    MCPY_M("pub_tensor", t_pub_tensor,
      "pub_tensor(key, tensor, config=ReplicateConfig()) -> int: put_tensor with a "
      "config."),
    MCPY_M("batch_pub_tensor", t_batch_pub_tensor,
      "batch_pub_tensor(keys, tensors_list, config=ReplicateConfig()) -> list[int]."),
    MCPY_M("put_tensor_with_tp", t_put_tensor_with_tp,
      "put_tensor_with_tp(key, tensor, tp_rank=0, tp_size=1, split_dim=0) -> int: "
      "tp_size <= 1 is put_tensor; else every one of the tp_size uniform shards along "
      "split_dim is stored under f'{key}_tp_{rank}' (non-uniform split: -600). 0 or the "
      "first failing shard's code."),
    MCPY_M("pub_tensor_with_tp", t_pub_tensor_with_tp,
      "pub_tensor_with_tp(key, tensor, config=ReplicateConfig(), tp_rank=0, tp_size=1, "
      "split_dim=0) -> int."),
    MCPY_M("batch_put_tensor_with_tp", t_batch_put_tensor_with_tp,
      "batch_put_tensor_with_tp(base_keys, tensors_list, tp_rank=0, tp_size=1, "
      "split_dim=0) -> list[int]."),
    MCPY_M("batch_pub_tensor_with_tp", t_batch_pub_tensor_with_tp,
      "batch_pub_tensor_with_tp(base_keys, tensors_list, config=ReplicateConfig(), "
      "tp_rank=0, tp_size=1, split_dim=0) -> list[int]."),
    MCPY_M("put_tensor_from", t_put_tensor_from,
      "put_tensor_from(key, buffer_ptr, size) -> int: stores the caller's "
      "[header][data] bytes after validating the header (-600 when invalid)."),
    MCPY_M("batch_put_tensor_from", t_batch_put_tensor_from,
      "batch_put_tensor_from(keys, buffer_ptrs, sizes) -> list[int]: all -600 when any "
      "buffer is invalid."),
    MCPY_M("put_tensor_with_tp_from", t_put_tensor_with_tp_from,
      "put_tensor_with_tp_from(key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0) "
      "-> int: a full tensor object is split into every shard; a shard object is stored "
      "as shard tp_rank."),
    MCPY_M("batch_put_tensor_with_tp_from", t_batch_put_tensor_with_tp_from,
      "batch_put_tensor_with_tp_from(base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1, "
      "split_dim=0) -> list[int]."),
    MCPY_M("upsert_tensor", t_upsert_tensor, "upsert_tensor(key, tensor) -> int."),
    MCPY_M("upsert_tensor_from", t_upsert_tensor_from,
      "upsert_tensor_from(key, buffer_ptr, size) -> int."),
    MCPY_M("batch_upsert_tensor_from", t_batch_upsert_tensor_from,
      "batch_upsert_tensor_from(keys, buffer_ptrs, sizes) -> list[int]."),
    MCPY_M("batch_upsert_tensor", t_batch_upsert_tensor,
      "batch_upsert_tensor(keys, tensors_list) -> list[int]."),
    MCPY_M("upsert_pub_tensor", t_upsert_pub_tensor,
      "upsert_pub_tensor(key, tensor, config=ReplicateConfig()) -> int."),
    MCPY_M("batch_upsert_pub_tensor", t_batch_upsert_pub_tensor,
      "batch_upsert_pub_tensor(keys, tensors_list, config=ReplicateConfig()) -> list[int]."),
    {NULL, NULL, 0, NULL},
};
