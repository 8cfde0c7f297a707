/* store_tensor.c: the core of the tensor API of MooncakeDistributedStore: access to the
 * codec, TP shard keys, TP arguments and the write batch shared by the writers
 * (store_tensor_put.c) and readers (store_tensor_get.c), plus the module-level tensor
 * helpers. It defines no store method itself.
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

#define TAG MCPY_TAG

/* ================================================================================== */
/* The codec                                                                           */
/* ================================================================================== */

PyObject *mcpy_codec(mcpy_state *st)
{
    /* imported once per module state; a failed import (no torch) is retried next call */
    if (!st->codec_mod) {
        PyObject *m = PyImport_ImportModule("mooncake._tensor_codec");
        if (!m)
            return NULL;
        PyObject *e = PyObject_GetAttrString(m, "TensorCodecError");
        if (!e) {
            Py_DECREF(m);
            return NULL;
        }
        st->codec_mod = m;
        st->codec_error = e;
    }
    return Py_NewRef(st->codec_mod);
}

PyObject *mcpy_codec_call(mcpy_state *st, const char *name, const char *fmt, ...)
{
    PyObject *m = mcpy_codec(st);
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
        if (!PyTuple_Check(args)) { /* "(O)" builds a tuple; a lone "O" does not */
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

int mcpy_codec_refused(mcpy_state *st, const char *fn)
{
    if (st->codec_error && PyErr_ExceptionMatches(st->codec_error)) {
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

PyObject *mcpy_tp_key(const mc_store_key *k, long rank)
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
/* The write batch: each object is [header][payload], two iovs                          */
/* ================================================================================== */

int mcpy_tb_init(mcpy_tbatch *b, size_t cap)
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

void mcpy_tb_clear(mcpy_tbatch *b)
{
    Py_CLEAR(b->keep);
    PyMem_Free(b->keys);
    PyMem_Free(b->iov);
    PyMem_Free(b->iovs);
    PyMem_Free(b->cnt);
    PyMem_Free(b->owner);
    memset(b, 0, sizeof(*b));
}

int mcpy_tb_add(mcpy_tbatch *b, mc_store_key key, PyObject *keyobj, PyObject *ser, size_t owner)
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
    b->cnt[i] = nbytes ? 2 : 1; /* an empty tensor is its header alone */
    b->owner[i] = owner;
    return 0;
}

int mcpy_tb_add_tensor(mcpy_state *st, mcpy_tbatch *b, mc_store_key key, PyObject *tensor, long tp_size,
                         long split_dim, size_t owner, const char *fn)
{
    if (tp_size <= 1) {
        PyObject *ser = mcpy_codec_call(st, "serialize", "(O)", tensor);
        if (!ser)
            return mcpy_codec_refused(st, fn);
        int r = mcpy_tb_add(b, key, NULL, ser, owner);
        Py_DECREF(ser);
        return r;
    }
    size_t first = b->n;
    for (long r = 0; r < tp_size; r++) {
        PyObject *ser = mcpy_codec_call(st, "serialize_tp_shard", "(Olll)", tensor, r, tp_size,
                                   split_dim);
        if (!ser) {
            b->n = first; /* drop this tensor's shards (their refs stay in keep) */
            return mcpy_codec_refused(st, fn);
        }
        PyObject *k = mcpy_tp_key(&key, r);
        int rc = -1;
        if (k) {
            mc_store_key sk = {PyBytes_AS_STRING(k), (size_t)PyBytes_GET_SIZE(k)};
            rc = mcpy_tb_add(b, sk, k, ser, owner);
        }
        Py_XDECREF(k);
        Py_DECREF(ser);
        if (rc < 0)
            return -1;
    }
    return 0;
}

void mcpy_tb_run(mcpy_store *self, mcpy_tbatch *b, const mc_store_replicate_config *cfg,
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

void mcpy_tb_fold(const mcpy_tbatch *b, const int *res, int *out)
{
    for (size_t i = 0; i < b->n; i++)
        if (out[b->owner[i]] == MC_OK && res[i] != MC_OK)
            out[b->owner[i]] = res[i];
}

/* ---- TP arguments ---- */

int mcpy_parse_tp(PyObject *a_rank, PyObject *a_size, PyObject *a_dim, const char *fn,
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

/* At most MC_STORE_MAX_PARTS shards: a larger one could never split a tensor uniformly
 * anyway; refused before anything is allocated. */
int mcpy_tensor_args(PyObject *args, PyObject *kwds, const char *fn, unsigned f,
                     mcpy_targs *out)
{
    bool many = f & MCPY_T_MANY;
    char *kw[8];
    PyObject **dst[8];
    PyObject *rank = NULL, *size = NULL, *dim = NULL;
    int n = 0;
    memset(out, 0, sizeof(*out));
    dst[n] = &out->key;
    kw[n++] = many ? (f & MCPY_T_TP ? "base_keys" : "keys") : "key";
    if (f & MCPY_T_VAL) {
        dst[n] = &out->val;
        kw[n++] = many ? "tensors_list" : "tensor";
    }
    if (f & MCPY_T_BUF) {
        dst[n] = &out->ptr;
        kw[n++] = many ? "buffer_ptrs" : "buffer_ptr";
        dst[n] = &out->size;
        kw[n++] = many ? "sizes" : "size";
    }
    int nreq = n;
    if (f & MCPY_T_CFG) {
        dst[n] = &out->cfg;
        kw[n++] = "config";
    }
    if (f & MCPY_T_TP) {
        dst[n] = &rank;
        kw[n++] = "tp_rank";
        dst[n] = &size;
        kw[n++] = "tp_size";
        if (f & MCPY_T_DIM) {
            dst[n] = &dim;
            kw[n++] = "split_dim";
        }
    }
    kw[n] = NULL;
    char fmt[96];
    snprintf(fmt, sizeof(fmt), "%.*s%s%.*s:%s", nreq, "OOO", n > nreq ? "|" : "", n - nreq,
             "OOOO", fn);
    PyObject *v[7] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw, &v[0], &v[1], &v[2], &v[3], &v[4],
                                     &v[5], &v[6]))
        return -1;
    for (int i = 0; i < n; i++)
        *dst[i] = v[i];
    return mcpy_parse_tp(rank, size, dim, fn, &out->tp_rank, &out->tp_size, &out->split_dim);
}

bool mcpy_tp_size_ok(long tp_size, const char *fn)
{
    if (tp_size <= (long)MC_STORE_MAX_PARTS)
        return true;
    mc_log(MC_LOG_ERROR, TAG, "%s: tp_size %ld is too large", fn, tp_size);
    return false;
}

/* ---- module functions ---- */

static PyObject *m_serialize_tensor(PyObject *m, PyObject *t)
{
    return mcpy_codec_call(PyModule_GetState(m), "serialize", "(O)", t);
}

static PyObject *m_tensor_metadata_size(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyLong_FromLong(304);
}

static PyObject *m_deserialize_tensor(PyObject *m, PyObject *payload)
{
    return mcpy_codec_call(PyModule_GetState(m), "decode", "(O)", payload);
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
