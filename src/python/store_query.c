/* store_query.c: the query and removal methods of MooncakeDistributedStore: is_exist,
 * batch_is_exist, get_size, remove, batch_remove, remove_by_regex, remove_all,
 * register_buffer, unregister_buffer, get_replica_desc, batch_get_replica_desc. No data
 * moves here; every master RPC runs with the GIL released. */
#include "store_py.h"

#include <stdio.h>
#include <string.h>

#include "mooncake/status.h"

/* is_exist / get_size / remove / remove_by_regex: one key (and force) in, one int out. */
typedef int64_t (*key_int_fn)(mc_store *, const mc_store_key *, bool);

static int64_t ki_exist(mc_store *s, const mc_store_key *k, bool f)
{
    (void)f;
    return mc_store_is_exist(s, k->data, k->len);
}

static int64_t ki_size(mc_store *s, const mc_store_key *k, bool f)
{
    (void)f;
    return mc_store_get_size(s, k->data, k->len);
}

static int64_t ki_remove(mc_store *s, const mc_store_key *k, bool f)
{
    return mc_store_remove(s, k->data, k->len, f);
}

static int64_t ki_remove_regex(mc_store *s, const mc_store_key *k, bool f)
{
    return mc_store_remove_by_regex(s, k->data, k->len, f);
}

/* name: the key argument's name; has_force: the method takes force=False too. */
static PyObject *do_key_int(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                            const char *name, bool has_force, key_int_fn call)
{
    mc_store_key key;
    int force = 0;
    if (mcpy_arg_key(args, kwds, fn, name, has_force ? &force : NULL, &key) < 0)
        return NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = call(((mcpy_store *)o)->store, &key, force != 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(r);
}

static PyObject *store_is_exist(PyObject *o, PyObject *a, PyObject *k)
{
    return do_key_int(o, a, k, "is_exist", "key", false, ki_exist);
}

static PyObject *store_get_size(PyObject *o, PyObject *a, PyObject *k)
{
    return do_key_int(o, a, k, "get_size", "key", false, ki_size);
}

static PyObject *store_remove(PyObject *o, PyObject *a, PyObject *k)
{
    return do_key_int(o, a, k, "remove", "key", true, ki_remove);
}

static PyObject *store_remove_by_regex(PyObject *o, PyObject *a, PyObject *k)
{
    return do_key_int(o, a, k, "remove_by_regex", "regex_pattern", true, ki_remove_regex);
}

/* batch_is_exist / batch_remove: keys (and force) in, one int per key out. */
typedef int (*batch_int_fn)(mcpy_store *, const mc_store_key *, size_t, bool, int *);

static int bi_exist(mcpy_store *s, const mc_store_key *k, size_t n, bool f, int *r)
{
    (void)f;
    return mc_store_batch_is_exist(s->store, k, n, r);
}

static int bi_remove(mcpy_store *s, const mc_store_key *k, size_t n, bool f, int *r)
{
    return mc_store_batch_remove(s->store, k, n, f, r);
}

static PyObject *do_batch_int(PyObject *o, PyObject *args, PyObject *kwds, const char *fn,
                              bool has_force, batch_int_fn call)
{
    int force = 0;
    mcpy_keys keys;
    if (mcpy_arg_keys(args, kwds, fn, has_force ? &force : NULL, &keys) < 0)
        return NULL;
    size_t n = keys.n;
    int *res = PyMem_Calloc(n ? n : 1, sizeof(int));
    PyObject *ret = NULL;
    if (!res) {
        PyErr_NoMemory();
    } else {
        if (n) {
            Py_BEGIN_ALLOW_THREADS
            call((mcpy_store *)o, keys.keys, n, force != 0, res);
            Py_END_ALLOW_THREADS
        }
        ret = mcpy_int_list(res, n);
    }
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_batch_is_exist(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_int(o, a, k, "batch_is_exist", false, bi_exist);
}

static PyObject *store_batch_remove(PyObject *o, PyObject *a, PyObject *k)
{
    return do_batch_int(o, a, k, "batch_remove", true, bi_remove);
}

/* batch_replica_clear(keys, segment_name="") -> list[str]: the keys cleared (result OK),
 * in order, as upstream; every other outcome (miss, another client's object, an active
 * lease, no replica on segment_name, a store not set up) just leaves the key out. */
static PyObject *store_batch_replica_clear(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"keys", "segment_name", NULL};
    PyObject *seq;
    const char *seg = "";
    Py_ssize_t seg_len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|s#:batch_replica_clear", kw, &seq, &seg,
                                     &seg_len))
        return NULL;
    if ((size_t)seg_len != strlen(seg)) {
        PyErr_SetString(PyExc_ValueError,
                        "batch_replica_clear(): segment_name must not contain NUL");
        return NULL;
    }
    mcpy_keys keys;
    if (mcpy_keys_from(seq, "batch_replica_clear", "keys", &keys) < 0)
        return NULL;
    size_t n = keys.n;
    int *res = PyMem_Calloc(n ? n : 1, sizeof(int));
    PyObject *ret = NULL;
    if (!res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        mc_store *st = ((mcpy_store *)o)->store;
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_replica_clear(st, keys.keys, n, seg, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyList_New(0);
    for (size_t i = 0; ret && i < n; i++) {
        if (res[i] != 0)
            continue;
        PyObject *k = PyUnicode_DecodeUTF8(keys.keys[i].data, (Py_ssize_t)keys.keys[i].len,
                                           "surrogateescape");
        if (!k || PyList_Append(ret, k) < 0)
            Py_CLEAR(ret);
        Py_XDECREF(k);
    }
out:
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

static PyObject *store_remove_all(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:remove_all", kw, &force))
        return NULL;
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_remove_all(((mcpy_store *)o)->store, force != 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(r);
}

static PyObject *store_get_replica_desc(PyObject *o, PyObject *args, PyObject *kwds)
{
    mc_store_key key;
    if (mcpy_arg_key(args, kwds, "get_replica_desc", "key", NULL, &key) < 0)
        return NULL;
    mcpy_state *st = mcpy_state_of(o);
    if (!st)
        return NULL;
    mc_store_replica_list *l = PyMem_Calloc(1, sizeof(*l)); /* large: not on the stack */
    if (!l)
        return PyErr_NoMemory();
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_get_replica_desc(((mcpy_store *)o)->store, key.data, key.len, l);
    Py_END_ALLOW_THREADS
    if (r != MC_OK)
        l->n = 0;
    PyObject *ret = mcpy_replica_list_to_py(st, l);
    PyMem_Free(l);
    return ret;
}

static PyObject *store_batch_get_replica_desc(PyObject *o, PyObject *args, PyObject *kwds)
{
    mcpy_state *st = mcpy_state_of(o);
    mcpy_keys keys;
    if (!st || mcpy_arg_keys(args, kwds, "batch_get_replica_desc", NULL, &keys) < 0)
        return NULL;
    size_t n = keys.n;
    mc_store_replica_list *ls = PyMem_Calloc(n ? n : 1, sizeof(*ls));
    int *res = PyMem_Calloc(n ? n : 1, sizeof(int));
    PyObject *ret = NULL;
    if (!ls || !res) {
        PyErr_NoMemory();
        goto out;
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_batch_get_replica_desc(((mcpy_store *)o)->store, keys.keys, n, ls, res);
        Py_END_ALLOW_THREADS
    }
    ret = PyDict_New();
    if (!ret)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (res[i] != MC_OK)
            continue;
        /* keyed by the caller's key object (str or bytes), misses left out */
        PyObject *l = mcpy_replica_list_to_py(st, &ls[i]);
        if (!l || PyDict_SetItem(ret, PyTuple_GET_ITEM(keys.tuple, (Py_ssize_t)i), l) < 0) {
            Py_XDECREF(l);
            Py_CLEAR(ret);
            goto out;
        }
        Py_DECREF(l);
    }
out:
    PyMem_Free(ls);
    PyMem_Free(res);
    mcpy_keys_clear(&keys);
    return ret;
}

/* ---- registration ---- */

static PyObject *store_register_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"buffer_ptr", "size", NULL};
    PyObject *a_ptr, *a_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:register_buffer", kw, &a_ptr, &a_size))
        return NULL;
    uint64_t ptr, size;
    if (mcpy_u64(a_ptr, "register_buffer", "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(a_size, "register_buffer", "size", &size) < 0)
        return NULL;
    int r;
    if (ptr == 0 || size == 0 || ptr + size < ptr || size > SIZE_MAX) {
        r = MC_INVALID_PARAMS;
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = mc_store_register_buffer(((mcpy_store *)o)->store, (void *)(uintptr_t)ptr,
                                     (size_t)size);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(r);
}

static PyObject *store_unregister_buffer(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"buffer_ptr", NULL};
    PyObject *a_ptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:unregister_buffer", kw, &a_ptr))
        return NULL;
    uint64_t ptr;
    if (mcpy_u64(a_ptr, "unregister_buffer", "buffer_ptr", &ptr) < 0)
        return NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_unregister_buffer(((mcpy_store *)o)->store, (void *)(uintptr_t)ptr);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}

PyMethodDef mcpy_query_methods[] = {
    MCPY_M("is_exist", store_is_exist,
      "is_exist(key) -> int: 1 exists, 0 absent (or still being written), negative on "
      "error. Grants a read lease (so remove() without force gets -706 for a while)."),
    MCPY_M("batch_is_exist", store_batch_is_exist,
      "batch_is_exist(keys) -> list[int]: 1 / 0 / negative per key."),
    MCPY_M("get_size", store_get_size,
      "get_size(key) -> int: the object's size in bytes, or -704 on a miss."),
    MCPY_M("remove", store_remove,
      "remove(key, force=False) -> int: 0, -704 miss, -706 a read lease is active (unless "
      "force), -703 a write is in flight."),
    MCPY_M("batch_remove", store_batch_remove,
      "batch_remove(keys, force=False) -> list[int]."),
    MCPY_M("batch_replica_clear", store_batch_replica_clear,
      "batch_replica_clear(keys, segment_name: str = \"\") -> list[str]: drops this "
      "client's own objects (segment_name \"\") or only their replicas on the segment "
      "named segment_name (an object left with none is gone); returns the keys cleared. "
      "Keys missing, written by another client, under an active read lease, with no "
      "replica on that segment, or a store not set up, are left out."),
    MCPY_M("remove_by_regex", store_remove_by_regex,
      "remove_by_regex(regex_pattern: str, force=False) -> int: number of objects removed "
      "whose key matches (search, PCRE2), leased ones skipped unless force; -600 bad "
      "pattern."),
    MCPY_M("remove_all", store_remove_all,
      "remove_all(force=False) -> int: number removed; leased objects skipped unless "
      "force."),
    MCPY_M("register_buffer", store_register_buffer,
      "register_buffer(buffer_ptr: int, size: int) -> int: registers memory with the "
      "transfer engine (not required for put_from/get_into here). 0 or negative."),
    MCPY_M("unregister_buffer", store_unregister_buffer,
      "unregister_buffer(buffer_ptr: int) -> int: 0, or -600 when not registered."),
    MCPY_M("get_replica_desc", store_get_replica_desc,
      "get_replica_desc(key) -> list[ReplicaDescriptor]: [] on a miss or error."),
    MCPY_M("batch_get_replica_desc", store_batch_get_replica_desc,
      "batch_get_replica_desc(keys) -> dict[key, list[ReplicaDescriptor]]: missing keys "
      "omitted."),
    {NULL, NULL, 0, NULL},
};
