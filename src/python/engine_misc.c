/* engine_misc.c: TransferEngine's remaining methods: get_first_buffer_address,
 * get_notifies, send_probe, warmup_efa_segment, get_local_topology, get_engine,
 * get_engine_ptr, _stats, and its attributes _mc_te and segment_name. */
#include "engine_py.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/status.h"

static PyObject *te_get_first_buffer_address(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment_name", NULL};
    PyObject *a;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_first_buffer_address", kwlist, &a))
        return NULL;
    if (mcpy_arg_str("get_first_buffer_address", "segment_name", a, 0, &name) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return PyLong_FromLong(0);
    uint64_t addr = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_get_first_buffer_address(te, name, &addr);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(rc == MC_OK ? (unsigned long long)addr : 0ull);
}

static PyObject *te_get_notifies(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    mcpy_te_state *st = mcpy_te_state_of((PyObject *)self);
    if (!st)
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list || !te)
        return list;
    mc_te_notify *v = NULL;
    size_t n = 0;
    if (mc_te_get_notifies(te, &v, &n) != MC_OK)
        return list;
    /* names are C strings, messages byte strings; both decode with surrogateescape so
     * non-UTF-8 bytes survive (TransferNotify.msg says how to get them back) */
    for (size_t i = 0; i < n; i++) {
        NotifyObject *o = (NotifyObject *)st->notify_type->tp_alloc(st->notify_type, 0);
        if (!o)
            goto fail;
        o->name = PyUnicode_DecodeUTF8(v[i].name, (Py_ssize_t)strlen(v[i].name),
                                       "surrogateescape");
        o->msg = PyUnicode_DecodeUTF8(v[i].msg, (Py_ssize_t)v[i].msg_len, "surrogateescape");
        if (!o->name || !o->msg || PyList_Append(list, (PyObject *)o) < 0) {
            Py_DECREF(o);
            goto fail;
        }
        Py_DECREF(o);
    }
    mc_te_notifies_free(v, n);
    return list;
fail:
    /* The drained notifications cannot be put back; they are lost with the error. */
    mc_te_notifies_free(v, n);
    Py_DECREF(list);
    return NULL;
}

static PyObject *te_send_probe(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"peer_server_name", NULL};
    PyObject *a;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:send_probe", kwlist, &a))
        return NULL;
    if (mcpy_arg_str("send_probe", "peer_server_name", a, 0, &name) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(-1);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_send_probe(te, name);
    Py_END_ALLOW_THREADS
    return ret_int(rc);
}

static PyObject *te_warmup_efa_segment(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment_name", NULL};
    PyObject *a;
    const char *name;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:warmup_efa_segment", kwlist, &a))
        return NULL;
    if (mcpy_arg_str("warmup_efa_segment", "segment_name", a, 0, &name) < 0)
        return NULL;
    return ret_int(0);
}

static PyObject *te_get_local_topology(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device_name", NULL};
    PyObject *a = NULL;
    const char *dev;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get_local_topology", kwlist, &a))
        return NULL;
    if (a && mcpy_arg_str("get_local_topology", "device_name", a, 1, &dev) < 0)
        return NULL;
    /* No RDMA devices here: one entry per NUMA node with empty preferred/available NIC
     * lists (the shape of upstream Topology::toString). */
    PyObject *parts = PyList_New(0);
    if (!parts)
        return NULL;
    for (int node = 0; node < 1024; node++) {
        char path[64];
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
        if (node > 0 && access(path, F_OK) != 0)
            break;
        PyObject *s = PyUnicode_FromFormat("\"cpu:%d\": [[], []]", node);
        if (!s || PyList_Append(parts, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(parts);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *body = sep ? PyUnicode_Join(sep, parts) : NULL;
    PyObject *res = body ? PyUnicode_FromFormat("{%U}", body) : NULL;
    Py_XDECREF(sep);
    Py_XDECREF(body);
    Py_DECREF(parts);
    return res;
}

static PyObject *te_get_engine(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    if (!te)
        Py_RETURN_NONE;
    mcpy_te_state *st = mcpy_te_state_of((PyObject *)self);
    if (!st)
        return NULL;
    PyObject *cap = mc__py_engine_handle_new((struct mc_te *)te, (PyObject *)self);
    if (!cap)
        return NULL;
    InnerObject *h = (InnerObject *)st->inner_type->tp_alloc(st->inner_type, 0);
    if (!h) {
        Py_DECREF(cap);
        return NULL;
    }
    h->capsule = cap;
    return (PyObject *)h;
}

static PyObject *te_get_engine_ptr(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)te_of(self));
}

static PyObject *te_stats(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    mc_te_stats st;
    memset(&st, 0, sizeof(st));
    if (te)
        mc_te_get_stats(te, &st);
    PyObject *d = Py_BuildValue("{sKsKsKsKsKsKsKsKsK}", "tcp_bytes_sent",
                         (unsigned long long)st.tcp_bytes_sent, "tcp_bytes_received",
                         (unsigned long long)st.tcp_bytes_received, "shm_bytes",
                         (unsigned long long)st.shm_bytes, "served_bytes",
                         (unsigned long long)st.served_bytes, "refused_requests",
                         (unsigned long long)st.refused_requests, "tasks_completed",
                         (unsigned long long)st.tasks_completed, "tasks_failed",
                         (unsigned long long)st.tasks_failed, "connections_opened",
                         (unsigned long long)st.connections_opened, "connections_failed",
                         (unsigned long long)st.connections_failed);
    if (!d)
        return NULL;
    /* issue 11: refusals on this engine's ports (transfer_engine.h mc_te_stats) */
    PyObject *more = Py_BuildValue("{sKsKsKsKsKsKsKsK}", "auth_refused",
                                   (unsigned long long)st.auth_refused, "auth_failed",
                                   (unsigned long long)st.auth_failed, "conn_limit_refused",
                                   (unsigned long long)st.conn_limit_refused,
                                   "per_ip_refused", (unsigned long long)st.per_ip_refused,
                                   "peercred_refused", (unsigned long long)st.peercred_refused,
                                   "pending_refused", (unsigned long long)st.pending_refused,
                                   /* issue 17: reads moved by their calling thread */
                                   "inline_bytes_received",
                                   (unsigned long long)st.inline_bytes_received,
                                   "inline_runs_handed_over",
                                   (unsigned long long)st.inline_runs_handed_over);
    if (!more || PyDict_Update(d, more) < 0) {
        Py_XDECREF(more);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(more);
    return d;
}

/* _mc_te: the capsule of a fresh get_engine() handle (the handle itself is dropped; the
 * capsule's context still keeps this object alive). */
static PyObject *te_get_capsule(TEObject *self, void *c)
{
    (void)c;
    PyObject *h = te_get_engine(self, NULL);
    if (!h || h == Py_None)
        return h;
    PyObject *cap = Py_NewRef(((InnerObject *)h)->capsule);
    Py_DECREF(h);
    return cap;
}

static PyObject *te_get_segment_name(TEObject *self, void *c)
{
    (void)c;
    mc_te *te = te_of(self);
    return PyUnicode_FromString(te ? mc_te_segment_name(te) : "");
}

/* The CUDA-stream transfers (upstream: TransferEnginePy::transferWriteOnCuda and kin,
 * CUDA builds only, enqueueing a host callback on the given stream). This build moves
 * host memory only, so each raises RuntimeError naming itself and what to use instead;
 * the arguments are not looked at. */
static PyObject *te_cuda_only(const char *fn)
{
    PyErr_Format(PyExc_RuntimeError,
                 "mooncake.engine: TransferEngine.%s() needs a CUDA build (it enqueues the "
                 "transfer on a CUDA stream); this build of mooncake-c moves host memory "
                 "only: use transfer_sync_write/transfer_sync_read or batch_transfer_sync_* "
                 "on host buffers", fn);
    return NULL;
}

#define MCPY_TE_CUDA_ONLY(NAME)                                                                \
    static PyObject *te_##NAME(TEObject *self, PyObject *args, PyObject *kw)                  \
    {                                                                                          \
        (void)self, (void)args, (void)kw;                                                      \
        return te_cuda_only(#NAME);                                                            \
    }
MCPY_TE_CUDA_ONLY(transfer_write_on_cuda)
MCPY_TE_CUDA_ONLY(transfer_read_on_cuda)
MCPY_TE_CUDA_ONLY(batch_transfer_write_on_cuda)
MCPY_TE_CUDA_ONLY(batch_transfer_read_on_cuda)
#undef MCPY_TE_CUDA_ONLY

#define KW (PyCFunction)(void (*)(void))

PyMethodDef mcpy_te_misc_methods[] = {
    {"get_first_buffer_address", KW te_get_first_buffer_address, KWFLAGS,
     "get_first_buffer_address(segment_name: str) -> int\n\n"
     "The address of the first buffer the named peer segment registered, or 0 when it "
     "has none or cannot be found. Upstream: TransferEnginePy::getFirstBufferAddress."},
#define MCPY_TE_CUDA_ROW(NAME, SIG)                                                            \
    {#NAME, KW te_##NAME, KWFLAGS,                                                             \
     #NAME SIG " -> None\n\nCUDA builds only (upstream enqueues the transfer on a CUDA "       \
     "stream); raises RuntimeError on this host-memory build."},
    MCPY_TE_CUDA_ROW(transfer_write_on_cuda, "(target_hostname, buffer, peer_buffer_address, "
                                             "length, stream_ptr=0, transport_hint='')")
    MCPY_TE_CUDA_ROW(transfer_read_on_cuda, "(target_hostname, buffer, peer_buffer_address, "
                                            "length, stream_ptr=0, transport_hint='')")
    MCPY_TE_CUDA_ROW(batch_transfer_write_on_cuda, "(target_hostname, buffers, "
                                                   "peer_buffer_addresses, lengths, "
                                                   "stream_ptr=0, transport_hint='')")
    MCPY_TE_CUDA_ROW(batch_transfer_read_on_cuda, "(target_hostname, buffers, "
                                                  "peer_buffer_addresses, lengths, "
                                                  "stream_ptr=0, transport_hint='')")
#undef MCPY_TE_CUDA_ROW
    {"get_notifies", (PyCFunction)te_get_notifies, METH_NOARGS,
     "get_notifies() -> List[TransferNotify]\n\nDrains the notifications peers sent to "
     "this engine (transfer_sync/batch_transfer_sync with notify=), oldest first. "
     "Upstream: TransferEnginePy::getNotifies."},
    {"send_probe", KW te_send_probe, KWFLAGS,
     "send_probe(peer_server_name: str) -> int\n\n"
     "Asks the peer's handshake daemon for a Probe answer. Returns 0 when it answered, "
     "non-zero (negative ErrorCode) otherwise. Used by SGLang to clear failed sessions. "
     "Upstream: TransferEnginePy::sendProbe."},
    {"warmup_efa_segment", KW te_warmup_efa_segment, KWFLAGS,
     "warmup_efa_segment(segment_name: str) -> int\n\nNo EFA here: returns 0. Upstream: "
     "TransferEnginePy::warmupEfaSegment (0 without EFA)."},
    {"get_local_topology", KW te_get_local_topology, KWFLAGS,
     "get_local_topology(device_name: str = None) -> str\n\nJSON of the NIC topology: "
     "one 'cpu:N' entry per NUMA node with empty preferred/available RDMA device lists "
     "(this build has no RDMA). Upstream: TransferEnginePy::getLocalTopology."},
    {"get_engine", (PyCFunction)te_get_engine, METH_NOARGS,
     "get_engine() -> InnerTransferEngine\n\nAn opaque handle to this engine for "
     "mooncake.store.MooncakeDistributedStore.setup(engine=...); it keeps this object "
     "alive. None before initialize. Upstream: TransferEnginePy::getEngine."},
    {"get_engine_ptr", (PyCFunction)te_get_engine_ptr, METH_NOARGS,
     "get_engine_ptr() -> int\n\nThe address of the underlying mc_te (0 before "
     "initialize); valid while this object lives. Upstream: "
     "TransferEnginePy::getEnginePtr."},
    {"_stats", (PyCFunction)te_stats, METH_NOARGS,
     "_stats() -> dict\n\nmooncake-c addition (not upstream): a snapshot of the engine's "
     "counters: tcp_bytes_sent/tcp_bytes_received (payload bytes this engine moved over "
     "TCP as initiator), shm_bytes (bytes copied over the same-host path), served_bytes, "
     "refused_requests (peer requests refused: bad range...), tasks_completed, "
     "tasks_failed, connections_opened, connections_failed; auth_refused, auth_failed, "
     "conn_limit_refused, per_ip_refused, peercred_refused, pending_refused (refusals on "
     "this engine's ports, issue 11); inline_bytes_received (the part of "
     "tcp_bytes_received that a store read's calling thread moved itself) and "
     "inline_runs_handed_over (such reads it left to the I/O threads), issue 17. "
     "Counts since the engine was created (bytes or events); see "
     "include/mooncake/transfer_engine.h mc_te_stats. All zero before initialize."},
    {NULL, NULL, 0, NULL},
};

PyGetSetDef mcpy_te_getset[] = {
    {"_mc_te", (getter)te_get_capsule, NULL,
     "PyCapsule \"" MC_PY_TE_CAPSULE "\" holding the mc_te * (None before initialize); "
     "see InnerTransferEngine.",
     NULL},
    {"segment_name", (getter)te_get_segment_name, NULL,
     "str: this engine's segment name ('host:rpc_port' with P2PHANDSHAKE), '' before "
     "initialize. mooncake-c addition.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
