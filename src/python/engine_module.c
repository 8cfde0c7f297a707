/* engine_module.c: the `mooncake.engine` extension module (CPython C API, no pybind11).
 *
 * Contract: ../shared/API.md §1 and §3. Upstream: the pybind module `engine` in
 * mooncake-integration/transfer_engine/transfer_engine_py.cpp (TransferEnginePy), whose
 * method names, keyword names, defaults and return conventions are kept here; the
 * engine underneath is ours (include/mooncake/transfer_engine.h).
 *
 * Module items: TransferEngine, TransferOpcode (IntEnum Read=0, Write=1, also exported
 * as module-level Read/Write and as TransferEngine.TransferOpcode, as upstream's
 * export_values), TransferNotify, InnerTransferEngine (the opaque handle get_engine()
 * returns; py_common.h says how mooncake.store reads it), ErrorCode, SUPPORT_* flags.
 *
 * Conventions (API.md §1):
 *   - status methods return 0 or a negative upstream status code (ErrorCode);
 *   - async submits return a batch id (> 0) or 0 on failure; transfer_check_status
 *     returns 1 done / 0 running / -1 failed / -2 timed out;
 *   - wrong argument types or counts raise TypeError naming the argument (an int
 *     argument outside [0, 2**64) is a type error, as pybind11's uint64 conversion);
 *     byte ranges handed to write_bytes_to_buffer/read_bytes_from_buffer that do not
 *     lie inside memory this engine registered or allocated raise ValueError.
 *
 * Local memory: every local range a transfer reads or writes must lie inside memory
 * registered through this object (register_memory, batch_register_memory) or allocated
 * by allocate_managed_buffer, as upstream's contract says ("source must be registered
 * local memory"); anything else returns INVALID_PARAMS instead of touching an
 * arbitrary address. Remote ranges are checked by the peer.
 *
 * Threads: see engine_py.h (GIL released around every call that may block).
 *
 * This file owns the module (PEP 489 multi-phase init: state, exec, traverse/clear),
 * TransferOpcode, the SUPPORT_* flags and the TransferEngine type (new/init/dealloc); the
 * methods come from the families listed in engine_py.h. It must not grow methods of its
 * own: a new method goes to its family's file.
 */
#include "engine_py.h"

#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

/* ------------------------------------------------------------------------------------ */
/* TransferEngine: the object                                                          */
/* ------------------------------------------------------------------------------------ */

static PyObject *te_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    TEObject *self = (TEObject *)type->tp_alloc(type, 0);
    return (PyObject *)self;
}

static int te_init(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {NULL};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":TransferEngine", kwlist))
        return -1;
    return 0;
}

static void te_dealloc(TEObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    mc_te *te = self->te;
    self->te = NULL;
    if (te) {
        Py_BEGIN_ALLOW_THREADS
        mc_te_destroy(te);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(self->ranges);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp); /* instances of a heap type hold a reference to it */
}

/* The class's method table: the families of engine_py.h joined in order. Built once per
 * process (PyType_FromSpec keeps pointers into it, so it is never freed); the GIL
 * serialises the first build. */
static PyMethodDef *all_te_methods(void)
{
    static PyMethodDef *all;
    if (all)
        return all;
    PyMethodDef *const families[] = {mcpy_te_memory_methods, mcpy_te_transfer_methods,
                                     mcpy_te_misc_methods};
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

static PyType_Slot te_slots[] = {
    {Py_tp_doc, "TransferEngine()\n\n"
              "Moves bytes between memory registered in this process and memory "
              "registered by peer engines (other processes or hosts), over TCP or, for "
              "engine-allocated memory on the same host, shared memory. Call "
              "initialize() first. Environment: MC_TRANSFER_TIMEOUT (s, default 30), "
              "MC_FORCE_TCP, MC_TCP_BIND_ADDRESS, MC_MIN_RPC_PORT/MC_MAX_RPC_PORT, "
              "MC_LOG_LEVEL. Upstream: mooncake.engine.TransferEngine "
              "(transfer_engine_py.cpp)."},
    {Py_tp_new, te_new},
    {Py_tp_init, te_init},
    {Py_tp_dealloc, te_dealloc},
    {Py_tp_getset, mcpy_te_getset},
    {Py_tp_methods, NULL}, /* all_te_methods(), filled in by engine_exec */
    {0, NULL},
};

static PyType_Spec te_spec = {
    .name = "mooncake.engine.TransferEngine",
    .basicsize = sizeof(TEObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = te_slots,
};

/* ------------------------------------------------------------------------------------ */
/* Module                                                                              */
/* ------------------------------------------------------------------------------------ */

_Static_assert(sizeof(uint64_t) == sizeof(void *) && sizeof(uint64_t) == sizeof(size_t),
               "the batch (un)register arrays are passed as uint64_t arrays");

static int add_opcode_enum(PyObject *m, mcpy_te_state *st)
{
    PyObject *members = NULL, *cls = NULL, *read = NULL, *write = NULL;
    int rc = -1;
    members = Py_BuildValue("[(si)(si)]", "Read", MC_TE_OP_READ, "Write", MC_TE_OP_WRITE);
    if (!members)
        goto out;
    cls = mc__py_int_enum(m, "TransferOpcode", members,
                          "Direction of a transfer: Read (0, peer -> local) or "
                          "Write (1, local -> peer). Upstream: "
                          "TransferEnginePy::TransferOpcode (pybind arithmetic "
                          "enum with export_values).");
    if (!cls)
        goto out;
    read = PyObject_GetAttrString(cls, "Read");
    write = PyObject_GetAttrString(cls, "Write");
    if (!read || !write)
        goto out;
    if (PyModule_AddObjectRef(m, "TransferOpcode", cls) < 0 ||
        PyModule_AddObjectRef(m, "Read", read) < 0 ||
        PyModule_AddObjectRef(m, "Write", write) < 0)
        goto out;
    /* TransferEngine.TransferOpcode, as upstream's adaptor_cls.attr("TransferOpcode"). The
     * type is immutable from Python, so the attribute goes into its dict directly. */
    if (PyDict_SetItemString(st->te_type->tp_dict, "TransferOpcode", cls) < 0)
        goto out;
    PyType_Modified(st->te_type);
    rc = 0;
out:
    Py_XDECREF(members);
    Py_XDECREF(cls);
    Py_XDECREF(read);
    Py_XDECREF(write);
    return rc;
}

mcpy_te_state *mcpy_te_state_of_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &mcpy_engine_def); /* borrowed */
    if (!m)
        return NULL;
    mcpy_te_state *st = PyModule_GetState(m);
    if (!st || !st->notify_type) { /* cleared at interpreter shutdown */
        PyErr_SetString(PyExc_RuntimeError, "the mooncake.engine module is gone");
        return NULL;
    }
    return st;
}

/* The types refer back to the module: the GC breaks that cycle through these. */
static int engine_traverse(PyObject *m, visitproc visit, void *arg)
{
    mcpy_te_state *st = PyModule_GetState(m);
    if (st) {
        Py_VISIT(st->te_type);
        Py_VISIT(st->notify_type);
        Py_VISIT(st->inner_type);
    }
    return 0;
}

static int engine_clear(PyObject *m)
{
    mcpy_te_state *st = PyModule_GetState(m);
    if (st) {
        Py_CLEAR(st->te_type);
        Py_CLEAR(st->notify_type);
        Py_CLEAR(st->inner_type);
    }
    return 0;
}

static void engine_free(void *m)
{
    (void)engine_clear((PyObject *)m);
}

/* Py_mod_exec: fills a fresh module (once per import; the state starts zeroed). The
 * attributes are added in the order of the single-phase module this replaced. */
static int engine_exec(PyObject *m)
{
    mcpy_te_state *st = PyModule_GetState(m);
    PyMethodDef *methods = all_te_methods();
    if (!methods) {
        PyErr_NoMemory();
        return -1;
    }
    for (PyType_Slot *s = te_slots; s->slot; s++)
        if (s->slot == Py_tp_methods)
            s->pfunc = methods;
    st->notify_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &mcpy_notify_spec, NULL);
    st->inner_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &mcpy_inner_spec, NULL);
    st->te_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &te_spec, NULL);
    if (!st->notify_type || !st->inner_type || !st->te_type)
        return -1;
    static const char *const flags[] = {"SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL",
                                        "SUPPORT_INTRA_NVLINK", "SUPPORT_CUDA", "SUPPORT_MUSA"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (PyModule_AddObjectRef(m, flags[i], Py_False) < 0)
            return -1;
    if (PyModule_AddType(m, st->te_type) < 0 || PyModule_AddType(m, st->notify_type) < 0 ||
        PyModule_AddType(m, st->inner_type) < 0 || add_opcode_enum(m, st) < 0 ||
        mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0 || mcpy_engine_add_rpc(m) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot engine_mod_slots[] = {
    {Py_mod_exec, engine_exec},
    {0, NULL},
};

PyModuleDef mcpy_engine_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.engine",
    .m_doc = "Mooncake transfer engine (mooncake-c), a drop-in for upstream's "
             "mooncake.engine.\n\n"
             "TransferEngine: the engine (see its methods). TransferOpcode: Read/Write. "
             "TransferNotify: a notification. InnerTransferEngine: the handle "
             "TransferEngine.get_engine() returns. ErrorCode: upstream status codes as "
             "an IntEnum (methods return them as negative ints). SUPPORT_*: build "
             "flags (all False: no CUDA/EFA/HIP/NVLink here).",
    .m_size = sizeof(mcpy_te_state),
    .m_slots = engine_mod_slots,
    .m_traverse = engine_traverse,
    .m_clear = engine_clear,
    .m_free = engine_free,
};

PyMODINIT_FUNC PyInit_engine(void);
PyMODINIT_FUNC PyInit_engine(void)
{
    return PyModuleDef_Init(&mcpy_engine_def);
}
