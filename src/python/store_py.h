/* store_py.h: pieces of the `mooncake.store` extension shared by its source files
 * (store_module.c: the module and MooncakeDistributedStore; store_types.c: ReplicateConfig,
 * enums, BufferHandle, descriptors, MooncakeHostMemAllocator, argument converters;
 * store_tensor.c: the tensor API). Internal to src/python.
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

/* ---- MooncakeDistributedStore ---- */
typedef struct {
    PyObject_HEAD
    mc_store *store;       /* created with the object; destroyed in tp_dealloc          */
    PyObject *engine_keep; /* setup(engine=...): keeps that engine alive until close    */
    bool busy_setup;       /* a setup() is running (GIL released); guarded by the GIL   */
    PyObject *weakreflist;
} mcpy_store;

extern PyTypeObject mcpy_store_type;

/* ---- converters ---- */

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

/* ---- ReplicateConfig ---- */
extern PyTypeObject mcpy_replicate_config_type;

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
int mcpy_rc_from(PyObject *cfg, const char *fn, mcpy_rc *out);
void mcpy_rc_clear(mcpy_rc *rc);

/* ---- BufferHandle ---- */
extern PyTypeObject mcpy_buffer_handle_type;
/* A new BufferHandle taking ownership of b (freed with the handle). On failure b is
 * freed and NULL returned with an exception set. */
PyObject *mcpy_buffer_handle_new(mc_store_buffer *b);

/* ---- replica descriptors ---- */
/* A list of ReplicaDescriptor objects for l. New reference or NULL. */
PyObject *mcpy_replica_list_to_py(const mc_store_replica_list *l);

/* ---- module-level objects made by store_types.c ---- */
int mcpy_types_init(PyObject *module);

/* ---- tensor API (store_tensor.c) ---- */
extern PyMethodDef mcpy_tensor_methods[];      /* MooncakeDistributedStore methods */
extern PyMethodDef mcpy_tensor_module_funcs[]; /* module-level _serialize_tensor, ... */

/* ---- helpers shared with store_tensor.c ---- */
/* Builds a Python list of n ints. */
PyObject *mcpy_int_list(const int *v, size_t n);
PyObject *mcpy_i64_list(const int64_t *v, size_t n);
/* A list of n copies of `code`. */
PyObject *mcpy_code_list(int code, size_t n);

#endif
