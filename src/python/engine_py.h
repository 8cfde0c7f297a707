/* engine_py.h: the internal header of the `mooncake.engine` extension (src/python only).
 * It owns the module state, the object layouts shared across files, the argument helpers
 * and the per-family method tables; nothing outside src/python includes it.
 *
 * Files (each owns one family; none touches another's statics):
 *   engine_module.c    module (PEP 489 multi-phase init, state), TransferOpcode,
 *                      SUPPORT_* flags, the TransferEngine type (new/init/dealloc) and
 *                      its method table assembled from the families below
 *   engine_args.c      argument helpers (ints, strings, int lists, opcodes)
 *   engine_types.c     TransferNotify, InnerTransferEngine (get_engine()'s handle)
 *   engine_memory.c    initialize*, get_rpc_port, (un)registration, managed buffers,
 *                      write/read_bytes_*, the table of tracked local ranges
 *   engine_transfer.c  transfer_sync*, batch_transfer_*, submit, status
 *   engine_misc.c      segments, notifications, probe, topology, handles, _stats,
 *                      and the attributes (_mc_te, segment_name)
 *
 * Module state (PEP 489): every type is a heap type made with PyType_FromModuleAndSpec;
 * code reaches the state through the object's type (mcpy_te_state_of,
 * PyType_GetModuleByDef). No Python object lives in a C static.
 *
 * Locks and the GIL: the extension has no C lock of its own. The GIL is released around
 * every call that may block (initialize, (un)registration, which republishes the
 * descriptor, every transfer and wait, segment lookups, probes) and while the engine is
 * destroyed; the tracked-range table is only touched with the GIL held. mc_log may be
 * called with or without the GIL (log.c calls the sink outside its lock). */
#ifndef MC_ENGINE_PY_H
#define MC_ENGINE_PY_H

#include "py_common.h"

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/transfer_engine.h"

#define PY_TAG "py.engine"

/* ---- module state ---- */
typedef struct {
    PyTypeObject *te_type;     /* TransferEngine */
    PyTypeObject *notify_type; /* TransferNotify */
    PyTypeObject *inner_type;  /* InnerTransferEngine */
} mcpy_te_state;

extern PyModuleDef mcpy_engine_def;

/* The state of the module that defined `tp` (or one of its bases). NULL with an
 * exception set when it cannot be found (not our type, interpreter shutdown). */
mcpy_te_state *mcpy_te_state_of_type(PyTypeObject *tp);
static inline mcpy_te_state *mcpy_te_state_of(PyObject *self)
{
    return mcpy_te_state_of_type(Py_TYPE(self));
}

/* ---- objects ---- */
typedef struct {
    PyObject_HEAD
    PyObject *name; /* str or bytes, never NULL after init */
    PyObject *msg;  /* str or bytes, never NULL after init */
} NotifyObject;

typedef struct {
    PyObject_HEAD
    PyObject *capsule; /* PyCapsule MC_PY_TE_CAPSULE; its context owns the engine object */
} InnerObject;

enum { RANGE_REGISTERED = 0, RANGE_MANAGED = 1 };

typedef struct {
    uint64_t addr, len;
    int kind; /* RANGE_* */
} py_range;

typedef struct {
    PyObject_HEAD
    mc_te *te;        /* NULL until initialize succeeded; then fixed until dealloc */
    int initializing; /* an initialize call is in flight (GIL released) */
    /* Local memory this object registered or allocated; guarded by the GIL. */
    py_range *ranges;
    size_t nranges, cap;
} TEObject;

/* The engine if initialized; NULL otherwise (no exception: callers return their
 * failure value, as upstream methods called before initialize fail by return code). */
static inline mc_te *te_of(TEObject *self)
{
    return self->te;
}

static inline PyObject *ret_int(long v)
{
    return PyLong_FromLong(v);
}

/* ---- argument helpers (engine_args.c): every message names the method and argument.
 * Each returns 0, or -1 with TypeError set. ---- */

/* An int in [0, 2**64) (anything with __index__: int, bool, numpy integers). */
int mcpy_arg_u64(const char *fn, const char *name, PyObject *o, uint64_t *out);
/* A str (UTF-8) or bytes without NUL characters; None gives NULL when allow_none.
 * The pointer is borrowed from o (valid while o lives). */
int mcpy_arg_str(const char *fn, const char *name, PyObject *o, int allow_none,
                 const char **out);
/* A sequence of ints in [0, 2**64) (list, tuple, numpy array...; not str/bytes).
 * *out: PyMem_Malloc'ed array of *n entries (NULL when empty); free with PyMem_Free. */
int mcpy_arg_u64_list(const char *fn, const char *name, PyObject *o, uint64_t **out,
                      size_t *n);
/* An opcode: a TransferOpcode member or a plain int 0 (Read) / 1 (Write). */
int mcpy_arg_opcode(const char *fn, PyObject *o, int *out);

/* ---- TransferNotify / InnerTransferEngine (engine_types.c) ---- */
extern PyType_Spec mcpy_notify_spec;
extern PyType_Spec mcpy_inner_spec;

/* A notify argument as UTF-8 bytes (both NULL for None / absent). */
typedef struct {
    PyObject *name; /* bytes */
    PyObject *msg;  /* bytes */
} notify_bytes;
int mcpy_arg_notify(mcpy_te_state *st, const char *fn, PyObject *o, notify_bytes *out);

/* ---- tracked local ranges (engine_memory.c) ---- */
/* Whether [addr, addr+len) lies inside one tracked range. len 0 is always fine. */
int mcpy_ranges_contain(const TEObject *self, uint64_t addr, uint64_t len);

/* ---- TransferEngine method families, NULL-terminated, joined in this order ---- */
extern PyMethodDef mcpy_te_memory_methods[];   /* engine_memory.c */
extern PyMethodDef mcpy_te_transfer_methods[]; /* engine_transfer.c */
extern PyMethodDef mcpy_te_misc_methods[];     /* engine_misc.c */
extern PyGetSetDef mcpy_te_getset[];           /* engine_misc.c */

#define KW (PyCFunction)(void (*)(void))
#define KWFLAGS (METH_VARARGS | METH_KEYWORDS)

/* ---- engine_rpc.c ---- */
/* Adds RpcInterface, CoroRPCInterface, ReceivedData, ReceivedTensor (from
 * mooncake._rpc_interface) to module m. 0, or -1 with an exception set. */
int mcpy_engine_add_rpc(PyObject *m);

#endif
