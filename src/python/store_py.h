/* store_py.h: the internal header of the `mooncake.store` extension (src/python only).
 * It owns the module state, the object layouts shared across files, the argument
 * converters and the per-family method tables; nothing outside src/python includes it.
 *
 * Files (each owns one family; none touches another's statics):
 *   store_module.c     module (PEP 489 multi-phase init, state), MooncakeDistributedStore
 *                      type (new/init/dealloc), its method table assembled from the
 *                      families below, bind_to_numa_node
 *   store_setup.c      setup / init_all / close / get_hostname / health_check
 *   store_write.c      put*, upsert*, batch_put*, *_from, *_multi_buffers
 *   store_read.c       get*, get_buffer*, get_into*, batch_get_into_multi_buffers
 *   store_query.c      is_exist, get_size, remove*, (un)register_buffer, replica descs
 *   store_convert.c    argument converters, result-list builders
 *   store_config.c     ReplicateConfig
 *   store_types.c      enums, BufferHandle, replica descriptors, MooncakeHostMemAllocator
 *   store_tensor.c     tensor core: codec access, TP keys, the tensor write batch
 *   store_tensor_put.c tensor writers;  store_tensor_get.c tensor readers
 *   store_ranges.c     get_into_ranges, *_multi_buffer_ranges, put/get sessions
 *   store_segments.c   mount_segment, unmount_segment, allocate_and_mount_segment,
 *                      unmount_and_free_segment
 *   store_dummy.c      setup_dummy, alloc_from_mem_pool, the dummy view's getattro
 *   store_tasks.c      create_copy_task, create_move_task, query_task, TaskType,
 *                      TaskStatus, QueryTaskResponse
 *   store_pyext.c      methods written in Python (mooncake/_store_extras.py: parallel
 *                      tensor IO, safetensors, CUDA-only readers), allocator hooks
 *
 * Module state (PEP 489): every type is a heap type made with PyType_FromModuleAndSpec;
 * code reaches the state through the object's type (mcpy_state_of, PyType_GetModuleByDef)
 * or the module (PyModule_GetState). No Python object lives in a C static.
 *
 * Locks and the GIL: the extension has one C lock of its own (the host-memory table in
 * store_types.c, never held while taking the GIL or calling the store). Every call into
 * mc_store_* that may block runs with the GIL released; the get_with allocator callback
 * (store_read.c) takes the GIL back while the store holds its call lock, so code holding
 * the GIL never waits for a store lock (get_hostname releases the GIL for that reason).
 * mc_log may be called with or without the GIL (log.c calls the sink outside its lock).
 *
 * Conventions of every converter below (upstream's pybind11 casts): a wrong Python type
 * raises TypeError naming the argument ("put(): argument 'key' must be str or bytes, not
 * int"); integers that must be unsigned raise TypeError when negative or >= 2**64, as a
 * failed pybind11 cast does. They return 0, or -1 with the exception set. */
#ifndef MC_STORE_PY_H
#define MC_STORE_PY_H

#include "py_common.h"

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/store.h"

#define MCPY_TAG "pystore"

/* ---- module state ---- */
typedef struct {
    PyTypeObject *store_type;    /* MooncakeDistributedStore */
    PyTypeObject *rc_type;       /* ReplicateConfig */
    PyTypeObject *bh_type;       /* BufferHandle */
    PyTypeObject *desc_type;     /* Descriptor */
    PyTypeObject *memdesc_type;  /* MemoryDescriptor */
    PyTypeObject *diskdesc_type; /* DiskDescriptor */
    PyTypeObject *replica_type;  /* ReplicaDescriptor */
    PyTypeObject *hostmem_type;  /* MooncakeHostMemAllocator */
    PyObject *replica_status_cls, *soft_pin_cls, *data_type_cls; /* IntEnum classes */
    PyObject *codec_mod;   /* mooncake._tensor_codec, imported by the first tensor call */
    PyObject *codec_error; /* its TensorCodecError */
} mcpy_state;

extern PyModuleDef mcpy_store_def;

/* The state of the module that defined `tp` (or one of its bases). NULL with
 * RuntimeError set when the module is gone (interpreter shutdown). Borrowed. */
mcpy_state *mcpy_state_of_type(PyTypeObject *tp);
static inline mcpy_state *mcpy_state_of(PyObject *self)
{
    return mcpy_state_of_type(Py_TYPE(self));
}

/* ---- MooncakeDistributedStore ---- */
typedef struct {
    PyObject_HEAD
    mc_store *store;       /* created with the object; destroyed in tp_dealloc          */
    PyObject *engine_keep; /* setup(engine=...): keeps that engine alive until close    */
    bool busy_setup;       /* a setup() is running (GIL released); guarded by the GIL   */
    PyObject *get_sessions; /* dict key bytes -> lease bytes (store_ranges.c); GIL      */
    PyObject *put_sessions; /* dict key bytes -> reservation bytes (store_ranges.c); GIL */
    PyObject *weakreflist;
    PyObject *dummy; /* setup_dummy's view (store_dummy.c), or NULL; GIL */
} mcpy_store;

/* Method families of MooncakeDistributedStore, NULL-terminated; store_module.c joins
 * them in this order into the type's method table. */
extern PyMethodDef mcpy_setup_methods[];      /* store_setup.c */
extern PyMethodDef mcpy_write_methods[];      /* store_write.c */
extern PyMethodDef mcpy_read_methods[];       /* store_read.c */
extern PyMethodDef mcpy_query_methods[];      /* store_query.c */
extern PyMethodDef mcpy_range_methods[];      /* store_ranges.c */
extern PyMethodDef mcpy_segment_methods[];    /* store_segments.c */
extern PyMethodDef mcpy_dummy_methods[];      /* store_dummy.c */
extern PyMethodDef mcpy_task_methods[];       /* store_tasks.c */
/* Adds TaskType, TaskStatus and QueryTaskResponse to the module (store_tasks.c). 0 / -1. */
int mcpy_tasks_init(PyObject *module);
/* tp_getattro of the store: public names go to the dummy view when there is one. */
PyObject *mcpy_store_getattro(PyObject *o, PyObject *name);
extern PyMethodDef mcpy_pyext_methods[];      /* store_pyext.c (Python-written methods) */
extern PyMethodDef mcpy_tensor_put_methods[]; /* store_tensor_put.c, then ... */
extern PyMethodDef mcpy_tensor_get_methods[]; /* ... store_tensor_get.c */
extern PyMethodDef mcpy_tensor_module_funcs[]; /* module-level _serialize_tensor, ... */

/* Every method table entry takes (self, args, kwargs). */
#define MCPY_KW (METH_VARARGS | METH_KEYWORDS)
#define MCPY_M(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, MCPY_KW, doc}

/* Adds store_pyext.c's module functions and mooncake._store_extras' classes to the
 * module. 0 or -1. */
int mcpy_pyext_init(PyObject *module);

/* Revokes every put session still open and drops the get sessions of self (close and
 * dealloc; store_ranges.c). GIL held; releases it for the revoke RPC. */
void mcpy_sessions_drop(mcpy_store *self);

/* ---- converters (store_convert.c) ---- */

/* A key: str (UTF-8) or bytes. The pointer borrows from obj (alive while obj is). */
int mcpy_key(PyObject *obj, const char *fn, const char *arg, mc_store_key *out);

/* A list/tuple of keys: copied into a tuple (so the keys stay alive while the GIL is
 * released even if the caller's list changes). Free with mcpy_keys_clear. */
typedef struct {
    PyObject *tuple;
    mc_store_key *keys;
    size_t n;
} mcpy_keys;
int mcpy_keys_from(PyObject *seq, const char *fn, const char *arg, mcpy_keys *out);
void mcpy_keys_clear(mcpy_keys *k);

/* The module state of store method `self` after parsing its arguments: as
 * PyArg_ParseTupleAndKeywords(args, kwds, spec ":" fn, kw, ...) (spec at most 20
 * characters). NULL with the exception set on a bad argument or when the module is gone. */
mcpy_state *mcpy_method_args(PyObject *self, PyObject *args, PyObject *kwds, const char *spec,
                             const char *fn, char **kw, ...);
/* The argument list of a method `fn` that takes one key (argument `name`) or one list of
 * keys ("keys"), plus an optional `force` bool when force is not NULL (then *force is 0
 * unless given): parsed with PyArg_ParseTupleAndKeywords (errors name fn) and converted
 * as mcpy_key / mcpy_keys_from. 0, or -1 with the exception set. */
int mcpy_arg_key(PyObject *args, PyObject *kwds, const char *fn, const char *name, int *force,
                 mc_store_key *out);
int mcpy_arg_keys(PyObject *args, PyObject *kwds, const char *fn, int *force, mcpy_keys *out);
/* An unsigned 64-bit int (pointer or size): int or an object with __index__. */
int mcpy_u64(PyObject *obj, const char *fn, const char *arg, uint64_t *out);
/* A signed int in [lo, hi]. */
int mcpy_int(PyObject *obj, const char *fn, const char *arg, long long lo, long long hi,
             long long *out);
/* A list/tuple of unsigned ints; *out is PyMem_Malloc'd (free with PyMem_Free). */
int mcpy_u64_list(PyObject *seq, const char *fn, const char *arg, uint64_t **out, size_t *n);
/* keys, buffer_ptrs and sizes of a batch call `fn` (argument names as in the error
 * messages): on success 0, *keys as mcpy_keys_from, *ptrs and *sizes PyMem_Malloc'd
 * with *np and *ns entries (lengths not compared). On error -1 with a Python exception
 * set and nothing left to free (*ptrs and *sizes NULL). */
int mcpy_keys_ptrs_sizes(PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes, const char *fn,
                         mcpy_keys *keys, uint64_t **ptrs, uint64_t **sizes, size_t *np,
                         size_t *ns);
/* A list of lists of unsigned ints, flattened: *flat holds every value, (*starts)[i] is
 * the index in flat of row i's first value and (*counts)[i] its length. All three are
 * PyMem_Malloc'd. */
int mcpy_u64_list2(PyObject *seq, const char *fn, const char *arg, uint64_t **flat,
                   size_t **starts, size_t **counts, size_t *nrows);
/* A str (or bytes) without NUL bytes as a C string borrowed from obj. */
int mcpy_cstr(PyObject *obj, const char *fn, const char *arg, const char **out);
/* A list/tuple that is not str/bytes: a new tuple. */
PyObject *mcpy_seq_tuple(PyObject *seq, const char *fn, const char *arg);

/* A contiguous buffer (any buffer-protocol object), read-only view. */
int mcpy_get_buffer(PyObject *obj, const char *fn, const char *arg, Py_buffer *view);

/* Scatter-gather arguments: keys[i] <-> iovs of all_buffer_ptrs[i] / all_sizes[i]. Rows
 * whose two lists differ in length get INVALID_PARAMS and are left out of the C call
 * (sel/nsel: the positions that go in). */
typedef struct {
    mcpy_keys keys;
    uint64_t *ptrs, *sizes;
    size_t *pst, *pct, *sst, *sct;
    size_t nprow, nsrow;
    mc_store_key *sel_keys;
    mc_store_iov *iov;
    const mc_store_iov **iovs;
    size_t *iovcnt;
    size_t *sel;
    size_t nsel;
} mcpy_multi_args;
/* Parses keys / all_buffer_ptrs / all_sizes of a *_multi_buffers call into m (res[i] =
 * INVALID_PARAMS for each row left out). Returns -1 (exception), 0 (ready), 1 (outer
 * lengths differ: every key gets INVALID_PARAMS). Free with mcpy_multi_clear (always). */
int mcpy_multi_parse(mcpy_multi_args *m, PyObject *a_keys, PyObject *a_ptrs, PyObject *a_sizes,
                     const char *fn, int *res);
void mcpy_multi_clear(mcpy_multi_args *m);

/* Result lists: n ints / int64s, or n copies of `code`. New reference or NULL. */
PyObject *mcpy_int_list(const int *v, size_t n);
PyObject *mcpy_i64_list(const int64_t *v, size_t n);
PyObject *mcpy_code_list(int code, size_t n);

/* ---- ReplicateConfig (store_config.c) ---- */
extern PyType_Spec mcpy_rc_spec;

/* A C config for `cfg` (a ReplicateConfig, or NULL/None = defaults). References and
 * string arrays are held in the holder until mcpy_rc_clear. */
typedef struct {
    mc_store_replicate_config c;
    PyObject *segs;   /* tuple of str */
    PyObject *groups; /* tuple of str or NULL */
    PyObject *seg;    /* str */
    const char **seg_ptrs;
    const char **group_ptrs;
} mcpy_rc;
int mcpy_rc_from(mcpy_state *st, PyObject *cfg, const char *fn, mcpy_rc *out);
void mcpy_rc_clear(mcpy_rc *rc);

/* ---- enums, BufferHandle, descriptors, host memory (store_types.c) ---- */

/* Creates the enums and helper types into `st` and adds them to `module`. 0 or -1. */
int mcpy_types_init(PyObject *module, mcpy_state *st);

/* cls(value) for an IntEnum class, or the plain int for an unknown value. New ref. */
PyObject *mcpy_enum_member(PyObject *cls, int value);
/* The member name of `value` in the SoftPinAction / ObjectDataType table, or "?". */
const char *mcpy_soft_pin_name(int value);
const char *mcpy_data_type_name(int value);

/* A new BufferHandle taking ownership of b (freed with the handle). On failure b is
 * freed and NULL returned with an exception set. */
PyObject *mcpy_buffer_handle_new(mcpy_state *st, mc_store_buffer *b);

/* A list of ReplicaDescriptor objects for l. New reference or NULL. */
PyObject *mcpy_replica_list_to_py(mcpy_state *st, const mc_store_replica_list *l);

/* ---- tensor core (store_tensor.c), used by store_tensor_put.c / store_tensor_get.c ---- */

/* The codec module mooncake._tensor_codec (new reference; imported once per module
 * state), or NULL with ImportError (no torch) or another exception set. */
PyObject *mcpy_codec(mcpy_state *st);
/* codec.<name>(*Py_BuildValue(fmt, ...)). New reference, or NULL with an exception. */
PyObject *mcpy_codec_call(mcpy_state *st, const char *name, const char *fmt, ...);
/* After a failed codec call: a TensorCodecError (the tensor/buffer is refused) is logged
 * and cleared, returning 1; anything else (ImportError, ...) stays set, returning -1. */
int mcpy_codec_refused(mcpy_state *st, const char *fn);
/* key + "_tp_<rank>" as a new bytes object. */
PyObject *mcpy_tp_key(const mc_store_key *k, long rank);
/* tp_rank / tp_size / split_dim arguments (each may be NULL: 0 / 1 / 0). 0 or -1. */
int mcpy_parse_tp(PyObject *a_rank, PyObject *a_size, PyObject *a_dim, const char *fn,
                  long *rank, long *size, long *dim);
/* The argument list of a tensor method `fn`, described by MCPY_T_* flags: the key
 * argument ("key"; with MANY "keys", or "base_keys" when TP too), then with VAL the
 * tensor ("tensor" / "tensors_list"), with BUF the memory ("buffer_ptr", "size" /
 * "buffer_ptrs", "sizes"), then optional: "config" (CFG), "tp_rank", "tp_size" (TP),
 * "split_dim" (TP and DIM). Objects are borrowed (NULL when not given); rank / size / dim
 * as mcpy_parse_tp. 0, or -1 with the exception set. */
enum {
    MCPY_T_MANY = 1, MCPY_T_VAL = 2, MCPY_T_BUF = 4, MCPY_T_CFG = 8, MCPY_T_TP = 16,
    MCPY_T_DIM = 32
};
typedef struct {
    PyObject *key, *val, *ptr, *size, *cfg;
    long tp_rank, tp_size, split_dim;
} mcpy_targs;
int mcpy_tensor_args(PyObject *args, PyObject *kwds, const char *fn, unsigned flags,
                     mcpy_targs *out);
/* A tp_size a put can honour (at most MC_STORE_MAX_PARTS shards); logs when not. */
bool mcpy_tp_size_ok(long tp_size, const char *fn);

/* A batch of tensor objects to write: object i is [header][payload], iov[2i..2i+1]. */
typedef struct {
    PyObject *keep; /* list: codec results and key objects, alive until tb_clear */
    size_t n, cap;
    mc_store_key *keys;
    mc_store_iov *iov; /* 2 per object */
    const mc_store_iov **iovs;
    size_t *cnt;
    size_t *owner; /* caller's index (base key) of each object */
} mcpy_tbatch;

int mcpy_tb_init(mcpy_tbatch *b, size_t cap);
void mcpy_tb_clear(mcpy_tbatch *b);
/* Adds the object `key` = [header][data_ptr, nbytes] from a codec serialize result
 * `ser` = (header: bytes, data_ptr: int, nbytes: int, owner). `keyobj` (may be NULL)
 * owns key's bytes. Steals nothing. Returns 0 or -1. */
int mcpy_tb_add(mcpy_tbatch *b, mc_store_key key, PyObject *keyobj, PyObject *ser,
                size_t owner);
/* Adds every object put_tensor_with_tp(key, tensor, tp_size, split_dim) writes (the
 * tensor itself when tp_size <= 1). Returns 0, 1 (codec refused), -1. */
int mcpy_tb_add_tensor(mcpy_state *st, mcpy_tbatch *b, mc_store_key key, PyObject *tensor,
                       long tp_size, long split_dim, size_t owner, const char *fn);
/* Writes the batch (GIL released); res[i] per object. */
void mcpy_tb_run(mcpy_store *self, mcpy_tbatch *b, const mc_store_replicate_config *cfg,
                 bool upsert, int *res);
/* Folds object results into per-owner results: the first non-zero code wins. */
void mcpy_tb_fold(const mcpy_tbatch *b, const int *res, int *out);

#endif
