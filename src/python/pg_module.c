/* pg_module.c: the `mooncake._pg` extension module: the data plane of mooncake.pg
 * (pg_comm.h) for python/mooncake/pg.py. It never includes torch: tensors arrive as
 * (address, byte length) pairs from `tensor.data_ptr()`, which is what keeps the
 * backend working on any torch version.
 *
 * Comm(rank, max_group, slot_bytes, timeout_ms, engine=None, host="127.0.0.1"):
 *   engine: None (the process's shared engine for `host`, started on first use,
 *   P2PHANDSHAKE; a private one for a second host) or a handle accepted by
 *   mooncake.store (TransferEngine or get_engine()), kept alive by the Comm. Collectives return (status, complete, suspects) with status
 *   DONE=0 / FAILED=1 / SYNC=2 (pg_comm.h); pointer lists are indexed by slot (length
 *   max_group, 0 where unused). The GIL is released around everything that may block.
 * Errors: bad arguments raise TypeError / ValueError naming the argument; an engine that
 * cannot start raises RuntimeError naming the status. */
#include "py_common.h"

#include <stdint.h>
#include <string.h>

#include "mooncake/status.h"
#include "mooncake/transfer_engine.h"
#include "pg_comm.h"

typedef struct {
    PyObject_HEAD mc_pg_comm *c;
    mc_te *te;
    int own_te; /* 0: the caller's, 1: private, 2: the shared one */
    PyObject *keep; /* the engine handle when not ours */
    int G;
} CommObject;

/* One engine per process for every Comm created without `engine` (same host): each
 * group adds its own mailbox to it. Guarded by the GIL; refcounted by the Comms. */
static mc_te *g_te;
static int g_te_refs;
static char g_te_host[256];

static int shared_engine_get(const char *host, int timeout_ms, mc_te **out)
{
    if (g_te && strcmp(g_te_host, host) == 0) {
        g_te_refs++;
        *out = g_te;
        return MC_OK;
    }
    if (g_te || strlen(host) >= sizeof g_te_host)
        return MC_INVALID_PARAMS; /* another host: the caller starts a private engine */
    mc_te_opts o = {0};
    o.force_tcp = -1;
    o.transfer_timeout_ms = (uint64_t)(timeout_ms > 1000 ? timeout_ms : 1000);
    mc_te *te = NULL;
    int rc = mc_te_create(&o, &te);
    if (rc == MC_OK) {
        /* the GIL stays held: nobody else may race for the shared engine meanwhile */
        rc = mc_te_initialize(te, host, "P2PHANDSHAKE", "tcp", NULL);
    }
    if (rc != MC_OK) {
        mc_te_destroy(te);
        return rc;
    }
    g_te = te;
    g_te_refs = 1;
    snprintf(g_te_host, sizeof g_te_host, "%s", host);
    *out = te;
    return MC_OK;
}

/* The shared engine stays up until the process exits even when no Comm uses it: peers
 * and later groups keep using its segment name. */
static void shared_engine_put(mc_te *te)
{
    if (te == g_te && g_te_refs > 0)
        g_te_refs--;
}

static int comm_ok(CommObject *self)
{
    if (!self->c) {
        PyErr_SetString(PyExc_RuntimeError, "Comm is closed");
        return 0;
    }
    return 1;
}

static void comm_close_impl(CommObject *self)
{
    if (self->c) {
        mc_pg_comm *c = self->c;
        mc_te *te = self->own_te == 1 ? self->te : NULL;
        self->c = NULL;
        Py_BEGIN_ALLOW_THREADS;
        mc__pg_comm_destroy(c);
        if (te)
            mc_te_destroy(te);
        Py_END_ALLOW_THREADS;
        if (self->own_te == 2)
            shared_engine_put(self->te);
    }
    self->te = NULL;
    Py_CLEAR(self->keep);
}

static void comm_dealloc(CommObject *self)
{
    comm_close_impl(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int comm_init(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"rank", "max_group", "slot_bytes", "timeout_ms", "engine", "host",
                             NULL};
    int rank, max_group, timeout_ms;
    Py_ssize_t slot_bytes;
    PyObject *engine = Py_None;
    const char *host = "127.0.0.1";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iini|Os:Comm", kwlist, &rank, &max_group,
                                     &slot_bytes, &timeout_ms, &engine, &host))
        return -1;
    if (max_group < 1 || max_group > MC_PG_MAX_GROUP) {
        PyErr_Format(PyExc_ValueError, "Comm(): max_group must be in 1..%d, not %d",
                     MC_PG_MAX_GROUP, max_group);
        return -1;
    }
    if (rank < 0 || rank >= max_group) {
        PyErr_Format(PyExc_ValueError, "Comm(): rank %d outside 0..%d", rank, max_group - 1);
        return -1;
    }
    if (slot_bytes < 4096 || slot_bytes > (64 << 20) || slot_bytes % 4096) {
        PyErr_SetString(PyExc_ValueError,
                        "Comm(): slot_bytes must be a multiple of 4096 in 4 KiB..64 MiB");
        return -1;
    }
    comm_close_impl(self);
    mc_te *te = NULL;
    if (engine != Py_None) {
        PyObject *keep = NULL;
        if (mc__py_engine_handle_get(engine, &te, &keep) < 0)
            return -1;
        if (!te) {
            Py_DECREF(keep);
            PyErr_SetString(PyExc_ValueError, "Comm(): engine is not initialized");
            return -1;
        }
        self->keep = keep;
        self->own_te = 0;
    } else if (shared_engine_get(host, timeout_ms, &te) == MC_OK) {
        self->own_te = 2;
    } else {
        mc_te_opts o = {0};
        o.force_tcp = -1;
        o.transfer_timeout_ms = (uint64_t)(timeout_ms > 1000 ? timeout_ms : 1000);
        int rc = mc_te_create(&o, &te);
        if (rc == MC_OK) {
            Py_BEGIN_ALLOW_THREADS;
            rc = mc_te_initialize(te, host, "P2PHANDSHAKE", "tcp", NULL);
            Py_END_ALLOW_THREADS;
        }
        if (rc != MC_OK) {
            mc_te_destroy(te);
            PyErr_Format(PyExc_RuntimeError, "Comm(): transfer engine on %s: %s", host,
                         mc_strerror(rc));
            return -1;
        }
        self->own_te = 1;
    }
    mc_pg_comm *c;
    Py_BEGIN_ALLOW_THREADS;
    c = mc__pg_comm_create(te, rank, max_group, (size_t)slot_bytes, timeout_ms);
    Py_END_ALLOW_THREADS;
    if (!c) {
        if (self->own_te == 1)
            mc_te_destroy(te);
        else if (self->own_te == 2)
            shared_engine_put(te);
        Py_CLEAR(self->keep);
        PyErr_SetString(PyExc_RuntimeError, "Comm(): cannot allocate the mailbox");
        return -1;
    }
    self->c = c;
    self->te = te;
    self->G = max_group;
    return 0;
}

/* ---- argument helpers ---- */

static int get_u64(PyObject *o, const char *name, uint64_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "argument '%s' must be a non-negative int", name);
        return -1;
    }
    *out = v;
    return 0;
}

static int get_int(PyObject *o, const char *name, int *out)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "argument '%s' must be an int", name);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* a list/tuple of G ints (addresses or lengths), or None (all zero) */
static int get_vec(CommObject *self, PyObject *o, const char *name, uint64_t *out)
{
    memset(out, 0, sizeof(uint64_t) * MC_PG_MAX_GROUP);
    if (o == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(o, name);
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != self->G) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "argument '%s' must have %d entries, not %zd", name,
                     self->G, n);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if (get_u64(items[i], name, &out[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    Py_DECREF(seq);
    return 0;
}

static int nargs_is(Py_ssize_t n, Py_ssize_t want, const char *fn)
{
    if (n != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", fn, want, n);
        return 0;
    }
    return 1;
}

static PyObject *result(mc_pg_result r)
{
    if (r.status < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "invalid collective arguments (dtype/op, inactive root, NULL buffer)");
        return NULL;
    }
    return Py_BuildValue("(iiK)", r.status, r.complete, (unsigned long long)r.suspects);
}

#define PTR(x) ((void *)(uintptr_t)(x))

/* ---- methods ---- */

static PyObject *comm_allreduce(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, ptr, count;
    int rerun, dtype, op;
    if (!comm_ok(self) || !nargs_is(n, 6, "allreduce") || get_u64(a[0], "seq", &seq) ||
        get_int(a[1], "rerun", &rerun) || get_u64(a[2], "ptr", &ptr) ||
        get_u64(a[3], "count", &count) || get_int(a[4], "dtype", &dtype) ||
        get_int(a[5], "op", &op))
        return NULL;
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_allreduce(self->c, seq, rerun, PTR(ptr), count, dtype, op);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_broadcast(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, ptr, nbytes;
    int root;
    if (!comm_ok(self) || !nargs_is(n, 4, "broadcast") || get_u64(a[0], "seq", &seq) ||
        get_u64(a[1], "ptr", &ptr) || get_u64(a[2], "nbytes", &nbytes) ||
        get_int(a[3], "root", &root))
        return NULL;
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_broadcast(self->c, seq, PTR(ptr), nbytes, root);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_allgather(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, in, nbytes, outs[MC_PG_MAX_GROUP];
    if (!comm_ok(self) || !nargs_is(n, 4, "allgather") || get_u64(a[0], "seq", &seq) ||
        get_vec(self, a[1], "outs", outs) || get_u64(a[2], "in_ptr", &in) ||
        get_u64(a[3], "nbytes", &nbytes))
        return NULL;
    void *o[MC_PG_MAX_GROUP];
    for (int i = 0; i < self->G; i++)
        o[i] = PTR(outs[i]);
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_allgather(self->c, seq, o, PTR(in), nbytes);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_reduce_scatter(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, out, count, ins[MC_PG_MAX_GROUP];
    int dtype, op;
    if (!comm_ok(self) || !nargs_is(n, 6, "reduce_scatter") || get_u64(a[0], "seq", &seq) ||
        get_u64(a[1], "out_ptr", &out) || get_vec(self, a[2], "ins", ins) ||
        get_u64(a[3], "count", &count) || get_int(a[4], "dtype", &dtype) ||
        get_int(a[5], "op", &op))
        return NULL;
    const void *in[MC_PG_MAX_GROUP];
    for (int i = 0; i < self->G; i++)
        in[i] = PTR(ins[i]);
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_reduce_scatter(self->c, seq, PTR(out), in, count, dtype, op);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_reduce(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, ptr, count;
    int rerun, dtype, op, root;
    if (!comm_ok(self) || !nargs_is(n, 7, "reduce") || get_u64(a[0], "seq", &seq) ||
        get_int(a[1], "rerun", &rerun) || get_u64(a[2], "ptr", &ptr) ||
        get_u64(a[3], "count", &count) || get_int(a[4], "dtype", &dtype) ||
        get_int(a[5], "op", &op) || get_int(a[6], "root", &root))
        return NULL;
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_reduce(self->c, seq, rerun, PTR(ptr), count, dtype, op, root);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_gather(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, in, nbytes, outs[MC_PG_MAX_GROUP];
    int root;
    if (!comm_ok(self) || !nargs_is(n, 5, "gather") || get_u64(a[0], "seq", &seq) ||
        get_vec(self, a[1], "outs", outs) || get_u64(a[2], "in_ptr", &in) ||
        get_u64(a[3], "nbytes", &nbytes) || get_int(a[4], "root", &root))
        return NULL;
    void *o[MC_PG_MAX_GROUP];
    for (int i = 0; i < self->G; i++)
        o[i] = PTR(outs[i]);
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_gather(self->c, seq, o, PTR(in), nbytes, root);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_scatter(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, out, nbytes, ins[MC_PG_MAX_GROUP];
    int root;
    if (!comm_ok(self) || !nargs_is(n, 5, "scatter") || get_u64(a[0], "seq", &seq) ||
        get_u64(a[1], "out_ptr", &out) || get_vec(self, a[2], "ins", ins) ||
        get_u64(a[3], "nbytes", &nbytes) || get_int(a[4], "root", &root))
        return NULL;
    const void *in[MC_PG_MAX_GROUP];
    for (int i = 0; i < self->G; i++)
        in[i] = PTR(ins[i]);
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_scatter(self->c, seq, PTR(out), in, nbytes, root);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_alltoall(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq, outs[MC_PG_MAX_GROUP], olens[MC_PG_MAX_GROUP], ins[MC_PG_MAX_GROUP],
        ilens[MC_PG_MAX_GROUP];
    if (!comm_ok(self) || !nargs_is(n, 5, "alltoall") || get_u64(a[0], "seq", &seq) ||
        get_vec(self, a[1], "outs", outs) || get_vec(self, a[2], "out_lens", olens) ||
        get_vec(self, a[3], "ins", ins) || get_vec(self, a[4], "in_lens", ilens))
        return NULL;
    void *o[MC_PG_MAX_GROUP];
    const void *in[MC_PG_MAX_GROUP];
    size_t ol[MC_PG_MAX_GROUP], il[MC_PG_MAX_GROUP];
    for (int i = 0; i < self->G; i++) {
        o[i] = PTR(outs[i]);
        in[i] = PTR(ins[i]);
        ol[i] = olens[i];
        il[i] = ilens[i];
    }
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_alltoall(self->c, seq, o, ol, in, il);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_barrier(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq;
    if (!comm_ok(self) || !nargs_is(n, 1, "barrier") || get_u64(a[0], "seq", &seq))
        return NULL;
    mc_pg_result r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc__pg_barrier(self->c, seq);
    Py_END_ALLOW_THREADS;
    return result(r);
}

static PyObject *comm_p2p_post(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    int send, peer;
    uint64_t ptr, nbytes;
    if (!comm_ok(self) || !nargs_is(n, 5, "p2p_post") || get_int(a[0], "send", &send) ||
        get_int(a[1], "peer", &peer) || get_u64(a[3], "ptr", &ptr) ||
        get_u64(a[4], "nbytes", &nbytes))
        return NULL;
    long long tag = PyLong_AsLongLong(a[2]);
    if (tag == -1 && PyErr_Occurred())
        return NULL;
    int64_t id;
    Py_BEGIN_ALLOW_THREADS;
    id = mc__pg_p2p_post(self->c, send, peer, (int64_t)tag, PTR(ptr), nbytes);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLongLong(id);
}

static PyObject *comm_p2p_wait(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t id;
    long long timeout;
    if (!comm_ok(self) || !nargs_is(n, 2, "p2p_wait") || get_u64(a[0], "id", &id))
        return NULL;
    timeout = PyLong_AsLongLong(a[1]);
    if (timeout == -1 && PyErr_Occurred())
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc__pg_p2p_wait(self->c, (int64_t)id, timeout);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(rc);
}

static PyObject *comm_set_peer(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    int slot;
    uint64_t base;
    const char *seg;
    if (!comm_ok(self) || !nargs_is(n, 3, "set_peer") || get_int(a[0], "slot", &slot) ||
        mc__py_cstr("set_peer", "segment", a[1], 0, &seg) || get_u64(a[2], "base", &base))
        return NULL;
    if (slot < 0 || slot >= self->G) {
        PyErr_Format(PyExc_ValueError, "set_peer(): slot %d outside 0..%d", slot,
                     self->G - 1);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc__pg_comm_set_peer(self->c, slot, seg, base);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(rc);
}

static PyObject *comm_set_view(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t epoch, active;
    if (!comm_ok(self) || !nargs_is(n, 2, "set_view") || get_u64(a[0], "epoch", &epoch) ||
        get_u64(a[1], "active", &active))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    mc__pg_comm_set_view(self->c, epoch, active);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

static PyObject *comm_request_sync(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    uint64_t seq;
    if (!comm_ok(self) || !nargs_is(n, 1, "request_sync") || get_u64(a[0], "seq", &seq))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    mc__pg_comm_request_sync(self->c, seq);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

static PyObject *comm_probe(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    int slot, ok;
    if (!comm_ok(self) || !nargs_is(n, 1, "probe") || get_int(a[0], "slot", &slot))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    ok = mc__pg_comm_probe(self->c, slot);
    Py_END_ALLOW_THREADS;
    return PyBool_FromLong(ok);
}

static PyObject *comm_set_timeout(CommObject *self, PyObject *const *a, Py_ssize_t n)
{
    int ms;
    if (!comm_ok(self) || !nargs_is(n, 1, "set_timeout") || get_int(a[0], "timeout_ms", &ms))
        return NULL;
    mc__pg_comm_set_timeout(self->c, ms);
    Py_RETURN_NONE;
}

static PyObject *comm_close(CommObject *self, PyObject *noargs)
{
    (void)noargs;
    comm_close_impl(self);
    Py_RETURN_NONE;
}

static PyObject *comm_get_segment(CommObject *self, void *closure)
{
    (void)closure;
    if (!comm_ok(self))
        return NULL;
    return PyUnicode_FromString(mc_te_segment_name(self->te));
}

static PyObject *comm_get_base(CommObject *self, void *closure)
{
    (void)closure;
    if (!comm_ok(self))
        return NULL;
    return PyLong_FromUnsignedLongLong(mc__pg_comm_base(self->c));
}

static PyObject *comm_get_size(CommObject *self, void *closure)
{
    (void)closure;
    if (!comm_ok(self))
        return NULL;
    return PyLong_FromSize_t(mc__pg_comm_size(self->c));
}

#define FC(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL

static PyMethodDef comm_methods[] = {
    {"allreduce", FC(comm_allreduce), "allreduce(seq, rerun, ptr, count, dtype, op)"},
    {"broadcast", FC(comm_broadcast), "broadcast(seq, ptr, nbytes, root)"},
    {"allgather", FC(comm_allgather), "allgather(seq, outs, in_ptr, nbytes)"},
    {"reduce_scatter", FC(comm_reduce_scatter),
     "reduce_scatter(seq, out_ptr, ins, count, dtype, op)"},
    {"reduce", FC(comm_reduce), "reduce(seq, rerun, ptr, count, dtype, op, root)"},
    {"gather", FC(comm_gather), "gather(seq, outs, in_ptr, nbytes, root)"},
    {"scatter", FC(comm_scatter), "scatter(seq, out_ptr, ins, nbytes, root)"},
    {"alltoall", FC(comm_alltoall), "alltoall(seq, outs, out_lens, ins, in_lens)"},
    {"barrier", FC(comm_barrier), "barrier(seq)"},
    {"p2p_post", FC(comm_p2p_post), "p2p_post(send, peer, tag, ptr, nbytes) -> id (-1: refused)"},
    {"p2p_wait", FC(comm_p2p_wait),
     "p2p_wait(id, timeout_ms) -> 0 done, 1 pending, -1 failed"},
    {"set_peer", FC(comm_set_peer), "set_peer(slot, segment, base) -> status"},
    {"set_view", FC(comm_set_view), "set_view(epoch, active_mask)"},
    {"request_sync", FC(comm_request_sync), "request_sync(seq)"},
    {"probe", FC(comm_probe), "probe(slot) -> bool"},
    {"set_timeout", FC(comm_set_timeout), "set_timeout(timeout_ms)"},
    {"close", (PyCFunction)comm_close, METH_NOARGS, "close(): frees the mailbox/engine"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef comm_getset[] = {
    {"segment_name", (getter)comm_get_segment, NULL, "the engine's segment name", NULL},
    {"base", (getter)comm_get_base, NULL, "the mailbox address", NULL},
    {"size", (getter)comm_get_size, NULL, "the mailbox size in bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._pg.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Comm(rank, max_group, slot_bytes, timeout_ms, engine=None, host='127.0.0.1')",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)comm_init,
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
};

static struct PyModuleDef pg_module = {
    PyModuleDef_HEAD_INIT, "mooncake._pg",
    "Data plane of mooncake.pg (the mooncake-cpu torch.distributed backend).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pg(void);
PyMODINIT_FUNC PyInit__pg(void)
{
    if (PyType_Ready(&CommType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&pg_module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Comm", (PyObject *)&CommType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_GROUP", MC_PG_MAX_GROUP) < 0 ||
        PyModule_AddIntConstant(m, "DONE", MC_PG_DONE) < 0 ||
        PyModule_AddIntConstant(m, "FAILED", MC_PG_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "SYNC", MC_PG_SYNC) < 0 || mc__py_route_logs() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
