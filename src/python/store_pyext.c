/* store_pyext.c: the MooncakeDistributedStore methods written in Python
 * (python/mooncake/_store_extras.py: the unified parallel tensor IO, the safetensors
 * helpers, the CUDA-only readers), the module-level classes of that file (ParallelAxis,
 * TensorParallelism, ReadTarget) and the allocator hooks get_alloc_func_addr /
 * get_free_func_addr. Each method here forwards (self, *args, **kwargs) to the function
 * of the same name in mooncake._store_extras; that module is looked up in sys.modules on
 * each call (no Python object lives in a C static). */
#include "store_py.h"

#include <stdlib.h>
#include <unistd.h>

#define EXTRAS "mooncake._store_extras"

static PyObject *forward(PyObject *self, const char *name, PyObject *args, PyObject *kwds)
{
    PyObject *mod = PyImport_ImportModule(EXTRAS);
    if (!mod)
        return NULL;
    PyObject *fn = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    if (!fn)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *all = PyTuple_New(n + 1);
    if (!all) {
        Py_DECREF(fn);
        return NULL;
    }
    Py_INCREF(self);
    PyTuple_SET_ITEM(all, 0, self);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        Py_INCREF(a);
        PyTuple_SET_ITEM(all, i + 1, a);
    }
    PyObject *r = PyObject_Call(fn, all, kwds);
    Py_DECREF(all);
    Py_DECREF(fn);
    return r;
}

/* name, docstring (its first line is the signature gen_stubs.py reads) */
#define MCPY_PYEXT_TABLE(X)                                                                    \
    X(put_tensor_with_parallelism,                                                             \
      "put_tensor_with_parallelism(key, tensor, parallelism: TensorParallelism | None = None, "\
      "config=None, writer_partition=None) -> int: stores tensor as the object of its "        \
      "parallel axes: none -> key; one TP axis -> key_tp_<rank> (tensor is that rank's "      \
      "shard); TP with other axes -> the TP shard of the full tensor; writer_partition "      \
      "(rank, size, split_dim) -> that shard of the full tensor. 0 or negative (-600 "        \
      "refused).")                                                                             \
    X(batch_put_tensor_with_parallelism,                                                       \
      "batch_put_tensor_with_parallelism(keys, tensors_list, parallelisms=None, config=None, " \
      "writer_partitions=None) -> list[int]: one batch put for all items.")                   \
    X(put_tensor_with_parallelism_from,                                                        \
      "put_tensor_with_parallelism_from(key, buffer_ptr: int, size: int, parallelism=None, "   \
      "config=None, writer_partition=None) -> int: as put_tensor_with_parallelism for the "   \
      "tensor object [header][data] at buffer_ptr.")                                           \
    X(batch_put_tensor_with_parallelism_from,                                                  \
      "batch_put_tensor_with_parallelism_from(keys, buffer_ptrs, sizes, parallelisms=None, "   \
      "config=None, writer_partitions=None) -> list[int]")                                     \
    X(upsert_tensor_with_parallelism,                                                          \
      "upsert_tensor_with_parallelism(key, tensor, parallelism=None, config=None, "            \
      "writer_partition=None) -> int: as put_tensor_with_parallelism, replacing.")            \
    X(batch_upsert_tensor_with_parallelism,                                                    \
      "batch_upsert_tensor_with_parallelism(keys, tensors_list, parallelisms=None, "           \
      "config=None, writer_partitions=None) -> list[int]")                                     \
    X(upsert_tensor_with_parallelism_from,                                                     \
      "upsert_tensor_with_parallelism_from(key, buffer_ptr: int, size: int, "                  \
      "parallelism=None, config=None, writer_partition=None) -> int")                         \
    X(batch_upsert_tensor_with_parallelism_from,                                               \
      "batch_upsert_tensor_with_parallelism_from(keys, buffer_ptrs, sizes, "                   \
      "parallelisms=None, config=None, writer_partitions=None) -> list[int]")                 \
    X(get_tensor_with_parallelism,                                                             \
      "get_tensor_with_parallelism(key, target: ReadTarget | None = None) -> Any: the "        \
      "stored object (as_stored), a shard (shard; re-sharded from the stored shards when "    \
      "their TP size differs) or the reconstructed tensor (full); None when not found.")      \
    X(batch_get_tensor_with_parallelism,                                                       \
      "batch_get_tensor_with_parallelism(keys, targets=None) -> list[Any]")                   \
    X(get_tensor_with_parallelism_into,                                                        \
      "get_tensor_with_parallelism_into(key, buffer_ptr: int, size: int, target=None) -> "     \
      "Any: as get_tensor_with_parallelism, the object [header][data] placed in the buffer "  \
      "and the result viewing it; None when not found or too large.")                         \
    X(batch_get_tensor_with_parallelism_into,                                                  \
      "batch_get_tensor_with_parallelism_into(keys, buffer_ptrs, sizes, targets=None) -> "     \
      "list[Any]")                                                                             \
    X(save_tensor_to_safetensor,                                                               \
      "save_tensor_to_safetensor(key, file_name: str | None = None) -> int: writes tensor "    \
      "key to a safetensors file (default name: the key). 0, -704 no tensor, -1 file "        \
      "error.")                                                                                \
    X(load_tensor_from_safetensor,                                                             \
      "load_tensor_from_safetensor(key: str | None = None, file_name: str | None = None, "     \
      "config=None) -> int: stores the file's tensor named key (else its first, with a "      \
      "warning) under key (default: the file name). 0, a put's code, -1 file error.")        \
    X(get_tensor_into_cuda,                                                                    \
      "get_tensor_into_cuda(key, tensor) -> Any: CUDA only; raises RuntimeError on this "      \
      "build (host memory only) and on a machine without CUDA.")                               \
    X(batch_get_tensor_into_cuda,                                                              \
      "batch_get_tensor_into_cuda(keys, tensors_list) -> list[Any]: CUDA only; raises "        \
      "RuntimeError on this build and on a machine without CUDA.")

#define MCPY__FW(NAME, DOC)                                                                    \
    static PyObject *fw_##NAME(PyObject *o, PyObject *a, PyObject *k)                          \
    {                                                                                          \
        return forward(o, #NAME, a, k);                                                        \
    }
MCPY_PYEXT_TABLE(MCPY__FW)
#undef MCPY__FW

#define MCPY__ROW(NAME, DOC) MCPY_M(#NAME, fw_##NAME, DOC),
PyMethodDef mcpy_pyext_methods[] = {MCPY_PYEXT_TABLE(MCPY__ROW){NULL, NULL, 0, NULL}};
#undef MCPY__ROW

/* ---- allocator hooks ----
 * Upstream returns the addresses of its allocator's `void *alloc(size_t)` and
 * `void free(void *)` (NoF builds; 0 otherwise), which callers wrap with ctypes and use
 * for host arenas they register with their accelerator. On this CPU build they are page
 * aligned host allocations (posix_memalign / free): usable from ctypes and with
 * register_buffer, never 0. */
static void *hook_alloc(size_t size)
{
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (size == 0 || posix_memalign(&p, page > 0 ? (size_t)page : 4096, size) != 0)
        return NULL;
    return p;
}

static void hook_free(void *p)
{
    free(p);
}

static PyObject *mod_get_alloc_func_addr(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromVoidPtr((void *)(uintptr_t)&hook_alloc);
}

static PyObject *mod_get_free_func_addr(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromVoidPtr((void *)(uintptr_t)&hook_free);
}

PyMethodDef mcpy_pyext_module_funcs[] = {
    {"get_alloc_func_addr", mod_get_alloc_func_addr, METH_NOARGS,
     "get_alloc_func_addr() -> int: address of a C `void *alloc(size_t size)` returning "
     "page-aligned host memory (NULL for 0 bytes or when out of memory); call it through "
     "ctypes.CFUNCTYPE(c_void_p, c_size_t)."},
    {"get_free_func_addr", mod_get_free_func_addr, METH_NOARGS,
     "get_free_func_addr() -> int: address of the matching C `void free(void *ptr)`; "
     "ctypes.CFUNCTYPE(None, c_void_p)."},
    {NULL, NULL, 0, NULL},
};

int mcpy_pyext_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, mcpy_pyext_module_funcs) < 0)
        return -1;
    PyObject *mod = PyImport_ImportModule(EXTRAS);
    if (!mod)
        return -1;
    static const char *const classes[] = {"ParallelAxis", "TensorParallelism", "ReadTarget"};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        PyObject *c = PyObject_GetAttrString(mod, classes[i]);
        if (!c || PyModule_AddObject(module, classes[i], c) < 0) {
            Py_XDECREF(c);
            Py_DECREF(mod);
            return -1;
        }
    }
    Py_DECREF(mod);
    return 0;
}
