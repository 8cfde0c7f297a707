/* store_module.c: the `mooncake.store` extension module (CPython C API, no pybind11) and
 * its main class, MooncakeDistributedStore, over the C store client (mooncake/store.h).
 *
 * Contract: ../shared/API.md §1, §2, §5 (return conventions are load-bearing: clients
 * test them literally); upstream: mooncake-integration/store/store_py.cpp, semantics in
 * ../shared/reference/upstream-mooncake.md §1 and §3. Every method that may block (the
 * master RPCs, transfers, setup, close) runs with the GIL released. Arguments are
 * converted first (TypeError naming the argument for a wrong type, as pybind11's casts),
 * then the C call runs, then the result is converted: status methods return 0 or a
 * negative ErrorCode, byte-count methods the object's size, existence 1/0/negative,
 * data methods b"" and handle methods None on failure; batch methods return one entry
 * per key ([] for empty input).
 *
 * This file owns the module (PEP 489 multi-phase init: state, exec, traverse/clear), the
 * MooncakeDistributedStore type (new/init/dealloc; its methods come from the method
 * families listed in store_py.h) and bind_to_numa_node. It must not grow methods of its
 * own: a new method goes to its family's file. */
#include "store_py.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

/* ================================================================================== */
/* MooncakeDistributedStore: the object                                                */
/* ================================================================================== */

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    mcpy_store *self = (mcpy_store *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    if (mc_store_create(&self->store) != MC_OK || !self->store) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_RuntimeError, "cannot create the store client");
        return NULL;
    }
    return (PyObject *)self;
}

static int store_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "MooncakeDistributedStore() takes no arguments "
                                         "(call setup(...) next)");
        return -1;
    }
    return 0;
}

static void store_dealloc(PyObject *o)
{
    mcpy_store *self = (mcpy_store *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (self->weakreflist)
        PyObject_ClearWeakRefs(o);
    mcpy_sessions_drop(self); /* a dropped put session is revoked */
    mc_store *s = self->store;
    self->store = NULL;
    if (s) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_destroy(s); /* closes first: unmounts, stops threads */
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->engine_keep);
    Py_CLEAR(self->dummy);
    tp->tp_free(o);
    Py_DECREF(tp);
}

/* The class's method table: the families of store_py.h joined in order. Built once per
 * process (PyType_FromSpec keeps pointers into it, so it is never freed); the GIL
 * serialises the first build. */
static PyMethodDef *all_store_methods(void)
{
    static PyMethodDef *all;
    if (all)
        return all;
    PyMethodDef *const families[] = {mcpy_setup_methods,      mcpy_write_methods,
                                     mcpy_read_methods,       mcpy_query_methods,
                                     mcpy_range_methods,      mcpy_segment_methods,
                                     mcpy_dummy_methods,      mcpy_tensor_put_methods,
                                     mcpy_tensor_get_methods, mcpy_pyext_methods,
                                     mcpy_task_methods};
    size_t n = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (PyMethodDef *m = families[f]; m->ml_name; m++)
            n++;
    PyMethodDef *t = PyMem_RawCalloc(n + 1, sizeof(PyMethodDef)); /* zeroed sentinel */
    if (!t)
        return NULL;
    size_t at = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (PyMethodDef *m = families[f]; m->ml_name; m++)
            t[at++] = *m;
    all = t;
    return all;
}

static PyMemberDef store_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(mcpy_store, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot store_slots[] = {
    {Py_tp_doc, "MooncakeDistributedStore(): a client of the distributed KV cache. Call "
                "setup(...) first; every method then talks to the master and moves bytes "
                "client to client. Methods release the GIL and are thread-safe. Return "
                "conventions follow upstream exactly (see each method)."},
    {Py_tp_new, store_new},
    {Py_tp_init, store_init},
    {Py_tp_dealloc, store_dealloc},
    {Py_tp_getattro, mcpy_store_getattro},
    {Py_tp_members, store_members},
    {Py_tp_methods, NULL}, /* all_store_methods(), filled in by store_exec */
    {0, NULL},
};

static PyType_Spec store_spec = {
    .name = "mooncake.store.MooncakeDistributedStore",
    .basicsize = sizeof(mcpy_store),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = store_slots,
};

/* ================================================================================== */
/* Module functions                                                                    */
/* ================================================================================== */

/* bind_to_numa_node(node): runs the calling thread on the CPUs of NUMA node `node` and
 * prefers its memory (upstream: numa_run_on_node + numa_set_preferred). Bad input or a
 * missing node only logs a warning; returns None. */
static PyObject *mod_bind_to_numa_node(PyObject *m, PyObject *arg)
{
    (void)m;
    long long node;
    if (mcpy_int(arg, "bind_to_numa_node", "node", INT32_MIN, INT32_MAX, &node) < 0)
        return NULL;
    if (node < 0 || node >= 1024) {
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: invalid node %lld", node);
        Py_RETURN_NONE;
    }
    char path[96], list[4096];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%lld/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(list, sizeof(list), f)) {
        if (f)
            fclose(f);
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: node %lld not found", node);
        Py_RETURN_NONE;
    }
    fclose(f);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (char *p = list; *p && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p)
            break;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            if (c >= 0)
                CPU_SET((int)c, &set);
        p = (*end == ',') ? end + 1 : end;
    }
    if (CPU_COUNT(&set) == 0 || sched_setaffinity(0, sizeof(set), &set) != 0)
        mc_log(MC_LOG_WARN, TAG, "bind_to_numa_node: cannot run on node %lld", node);
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
    mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
    /* MPOL_PREFERRED = 1 */
    if (syscall(SYS_set_mempolicy, 1, mask, 1024ul + 1) != 0)
        mc_log(MC_LOG_DEBUG, TAG, "bind_to_numa_node: set_mempolicy: %s", strerror(errno));
    Py_RETURN_NONE;
}

static PyMethodDef module_funcs[] = {
    {"bind_to_numa_node", mod_bind_to_numa_node, METH_O,
     "bind_to_numa_node(node: int) -> None: run this thread on NUMA node `node`'s CPUs "
     "and prefer its memory; a bad node only logs a warning."},
    {NULL, NULL, 0, NULL},
};

/* ================================================================================== */
/* Module: state and multi-phase init                                                  */
/* ================================================================================== */

mcpy_state *mcpy_state_of_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &mcpy_store_def); /* borrowed */
    if (!m)
        return NULL;
    mcpy_state *st = PyModule_GetState(m);
    if (!st || !st->rc_type) { /* cleared at interpreter shutdown */
        PyErr_SetString(PyExc_RuntimeError, "the mooncake.store module is gone");
        return NULL;
    }
    return st;
}

/* Visits / clears every object the state holds (the types refer back to the module, so
 * the module and its types form a cycle only the GC can break). */
#define STATE_OBJECTS(X)                                                                 \
    X(store_type) X(rc_type) X(bh_type) X(desc_type) X(memdesc_type) X(diskdesc_type)    \
    X(replica_type) X(hostmem_type) X(replica_status_cls) X(soft_pin_cls)                \
    X(data_type_cls) X(codec_mod) X(codec_error)

static int store_traverse(PyObject *m, visitproc visit, void *arg)
{
    mcpy_state *st = PyModule_GetState(m);
    if (!st)
        return 0;
#define VISIT(f) Py_VISIT(st->f);
    STATE_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int store_clear(PyObject *m)
{
    mcpy_state *st = PyModule_GetState(m);
    if (!st)
        return 0;
#define CLEAR(f) Py_CLEAR(st->f);
    STATE_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void store_free(void *m)
{
    (void)store_clear((PyObject *)m);
}

/* Py_mod_exec: fills a fresh module (once per import; the state starts zeroed). */
static int store_exec(PyObject *m)
{
    mcpy_state *st = PyModule_GetState(m);
    if (mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0 || mcpy_types_init(m, st) < 0 ||
        mcpy_tasks_init(m) < 0)
        return -1;
    PyMethodDef *methods = all_store_methods();
    if (!methods) {
        PyErr_NoMemory();
        return -1;
    }
    for (PyType_Slot *s = store_slots; s->slot; s++)
        if (s->slot == Py_tp_methods)
            s->pfunc = methods;
    st->store_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &store_spec, NULL);
    if (!st->store_type || PyModule_AddType(m, st->store_type) < 0)
        return -1;
    if (PyModule_AddFunctions(m, mcpy_tensor_module_funcs) < 0 || mcpy_pyext_init(m) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot store_mod_slots[] = {
    {Py_mod_exec, store_exec},
    {0, NULL},
};

PyModuleDef mcpy_store_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.store",
    .m_doc = "Mooncake distributed KV-cache store (mooncake-c).\n\n"
             "MooncakeDistributedStore: the client (setup, put/get, batch and zero-copy "
             "forms, tensors). ReplicateConfig: placement options. BufferHandle, "
             "ReplicaDescriptor, MooncakeHostMemAllocator, bind_to_numa_node. Enums: "
             "ErrorCode, ReplicaStatus, SoftPinAction, ObjectDataType.",
    .m_size = sizeof(mcpy_state),
    .m_methods = module_funcs,
    .m_slots = store_mod_slots,
    .m_traverse = store_traverse,
    .m_clear = store_clear,
    .m_free = store_free,
};

PyMODINIT_FUNC PyInit_store(void);
PyMODINIT_FUNC PyInit_store(void)
{
    return PyModuleDef_Init(&mcpy_store_def);
}
