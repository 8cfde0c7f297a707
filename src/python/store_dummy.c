/* store_dummy.c: MooncakeDistributedStore as a dummy client (setup_dummy,
 * alloc_from_mem_pool; upstream store_py.cpp setup_dummy / DummyClient). The channel to
 * the real client and the forwarding methods are Python (mooncake/_dummy_client.py, wire
 * format src/client/dummy_ipc.h); this file keeps that module's view object in the store
 * (self->dummy) and routes attribute lookups (all but dunders) to it while it is there
 * (mcpy_store_getattro), so every store method of a dummy forwards or refuses without a
 * check in each method's C code. GIL held throughout. */
#include "store_py.h"

#include <stdio.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define DUMMY_MOD "mooncake._dummy_client"

PyObject *mcpy_store_getattro(PyObject *o, PyObject *name)
{
    mcpy_store *self = (mcpy_store *)o;
    /* every name but dunders and the view's own way back (_dummy_clear) */
    if (self->dummy && PyUnicode_Check(name) &&
        !(PyUnicode_GET_LENGTH(name) > 1 && PyUnicode_READ_CHAR(name, 0) == '_' &&
          PyUnicode_READ_CHAR(name, 1) == '_') &&
        PyUnicode_CompareWithASCIIString(name, "_dummy_clear") != 0) {
        PyObject *r = PyObject_GetAttr(self->dummy, name);
        if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
            return r;
        PyErr_Clear();
    }
    return PyObject_GenericGetAttr(o, name);
}

/* setup_dummy(mem_pool_size, local_buffer_size, server_address) -> int */
static PyObject *store_setup_dummy(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"mem_pool_size", "local_buffer_size", "server_address", NULL};
    PyObject *a_pool, *a_lbuf, *a_addr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:setup_dummy", kw, &a_pool, &a_lbuf,
                                     &a_addr))
        return NULL;
    mcpy_store *self = (mcpy_store *)o;
    if (self->dummy || mc_store_is_setup(self->store))
        return PyLong_FromLong(MC_INVALID_PARAMS);
    PyObject *mod = PyImport_ImportModule(DUMMY_MOD);
    if (!mod)
        return NULL;
    PyObject *r = PyObject_CallMethod(mod, "setup_dummy", "OOOO", o, a_pool, a_lbuf, a_addr);
    Py_DECREF(mod);
    if (!r)
        return NULL;
    PyObject *rc = NULL, *view = NULL;
    if (!PyArg_ParseTuple(r, "OO", &rc, &view)) {
        Py_DECREF(r);
        return NULL;
    }
    if (view != Py_None) {
        Py_INCREF(view);
        Py_XSETREF(self->dummy, view);
    }
    Py_INCREF(rc);
    Py_DECREF(r);
    return rc;
}

/* alloc_from_mem_pool(size) -> int: 0 on a store that is not a dummy client (a dummy's
 * view answers it otherwise). */
static PyObject *store_alloc_from_mem_pool(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"size", NULL};
    PyObject *a_size;
    (void)o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:alloc_from_mem_pool", kw, &a_size))
        return NULL;
    uint64_t size;
    if (mcpy_u64(a_size, "alloc_from_mem_pool", "size", &size) < 0)
        return NULL;
    mc_log(MC_LOG_ERROR, MCPY_TAG, "alloc_from_mem_pool: this store is not a dummy client "
                                   "(setup_dummy): it has no shared pool");
    return PyLong_FromLong(0);
}

/* _dummy_clear(): the view's close() drops itself. */
static PyObject *store_dummy_clear(PyObject *o, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    Py_CLEAR(((mcpy_store *)o)->dummy);
    Py_RETURN_NONE;
}

/* _dummy_replicas(rows) -> list[ReplicaDescriptor]: the dummy's get_replica_desc answer
 * (rows of (status, replica_type, size, buffer_address, endpoint, protocol) as the real
 * client sent them) as the same objects a real client returns. */
static PyObject *store_dummy_replicas(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"rows", NULL};
    PyObject *rows;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:_dummy_replicas", kw, &PyList_Type, &rows))
        return NULL;
    mcpy_state *st = mcpy_state_of(o);
    if (!st)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    if (n > MC_STORE_MAX_REPLICAS) {
        PyErr_SetString(PyExc_ValueError, "_dummy_replicas: too many replicas");
        return NULL;
    }
    mc_store_replica_list *l = PyMem_Calloc(1, sizeof(*l));
    if (!l)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        mc_store_replica_desc *d = &l->replicas[i];
        int status, type;
        unsigned long long size, addr;
        const char *ep, *proto;
        Py_ssize_t epn, proton;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(rows, i), "iiKKs#s#:_dummy_replicas", &status,
                              &type, &size, &addr, &ep, &epn, &proto, &proton)) {
            PyMem_Free(l);
            return NULL;
        }
        d->status = status;
        d->replica_type = type;
        d->is_memory = type == 0;
        d->size = size;
        d->buffer_address = addr;
        snprintf(d->transport_endpoint, sizeof d->transport_endpoint, "%.*s", (int)epn, ep);
        snprintf(d->protocol, sizeof d->protocol, "%.*s", (int)proton, proto);
    }
    l->n = (uint32_t)n;
    PyObject *ret = mcpy_replica_list_to_py(st, l);
    PyMem_Free(l);
    return ret;
}

PyMethodDef mcpy_dummy_methods[] = {
    MCPY_M("setup_dummy", store_setup_dummy,
      "setup_dummy(mem_pool_size: int, local_buffer_size: int, server_address: str) -> int: "
      "makes this store a dummy client of the mooncake_client serving the port of "
      "server_address on this host (\"host:50052\"): it owns no segment and forwards every "
      "call; mem_pool_size bytes of shared memory (alloc_from_mem_pool) move data with no "
      "copy through the channel. 0; -600 bad arguments or already set up; -900 no real "
      "client there."),
    MCPY_M("alloc_from_mem_pool", store_alloc_from_mem_pool,
      "alloc_from_mem_pool(size: int) -> int: address of size bytes of the dummy client's "
      "shared pool (64-byte aligned; 0 when the pool is exhausted or this is not a dummy "
      "client)."),
    MCPY_M("_dummy_replicas", store_dummy_replicas,
      "_dummy_replicas(rows) -> list[ReplicaDescriptor]: internal (mooncake._dummy_client): "
      "replica descriptors from the rows a real client sent."),
    MCPY_M("_dummy_clear", store_dummy_clear,
      "_dummy_clear() -> None: internal (mooncake._dummy_client): drops the dummy view."),
    {NULL, NULL, 0, NULL},
};
