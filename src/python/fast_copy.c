/* fast_copy.c: the CPython extension module `mooncake._fast_copy`.
 *
 * concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1) -> int
 *
 * Copies the sources arrays[start:start+count] back to back into the destination memory
 * and returns the number of bytes written (the sum of the sources' byte sizes). Upstream
 * ships the same function in `mooncake-wheel/mooncake/_fast_copy.c` (its structured object
 * store stages ragged ndarray rows with it); the signature, the return value, the range
 * clamping and the error classes below follow that behaviour:
 *   - start < 0 is taken as 0, start > len(arrays) as len(arrays); count < 0, or a count
 *     that runs past the end, means "to the end"; an empty range copies nothing, returns
 *     0 and does not look at the destination;
 *   - a source that is not C-contiguous: ValueError "arrays[i] is not C-contiguous";
 *   - sources larger than the destination: ValueError "destination buffer too small:
 *     need N bytes, got M" (nothing is copied).
 * Ours accepts more source kinds than upstream's ndarray-only version: any object with
 * the buffer protocol (numpy arrays, bytes, bytearray, memoryview, array.array, mmap),
 * objects with `__array_interface__`, and CPU torch tensors (through data_ptr(),
 * nbytes and is_contiguous(); a tensor on another device is a ValueError). `arrays` may
 * be any sequence. `dest_ptr` is an address (int) or a writable buffer object; with a
 * buffer, dest_size must not exceed its length. Anything else is a TypeError naming the
 * argument or the item index.
 *
 * Shapes and units: sizes in bytes; nthreads is clamped to [1, 64] and to the number of
 * bytes; the work is split into equal byte ranges, one per thread.
 * Ownership: borrows every source and the destination for the duration of the call (the
 * call holds references to the source objects and their buffer views until it returns).
 * Threads: the copy runs with the GIL released, so several Python threads may copy at
 * once; the caller keeps the destination memory alive and does not write the sources
 * during the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#error "mooncake's extension modules need Python 3.11 or later"
#endif

#define FC_MAX_THREADS 64

/* One source: its memory and what keeps it alive. */
typedef struct {
    const char *ptr;
    size_t len;
    Py_buffer view; /* valid when has_view */
    int has_view;
} fc_src;

typedef struct {
    const fc_src *srcs;
    Py_ssize_t nsrc;
    char *dst;
    size_t begin, end; /* byte range of the concatenation this worker copies */
} fc_work;

/* Copies bytes [begin, end) of the concatenation of srcs into dst + begin. */
static void *fc_copy_range(void *arg)
{
    fc_work *w = arg;
    size_t off = 0;
    for (Py_ssize_t i = 0; i < w->nsrc && off < w->end; i++) {
        size_t s0 = off, s1 = off + w->srcs[i].len;
        off = s1;
        if (s1 <= w->begin)
            continue;
        size_t a = s0 > w->begin ? s0 : w->begin;
        size_t b = s1 < w->end ? s1 : w->end;
        if (b > a)
            memcpy(w->dst + a, w->srcs[i].ptr + (a - s0), b - a);
    }
    return NULL;
}

/* Reads an int-valued attribute or the result of a no-argument method. Returns 0 and
 * sets *out, or -1 with an exception set. */
static int fc_int_attr(PyObject *o, const char *name, int call, long long *out)
{
    PyObject *v = call ? PyObject_CallMethod(o, name, NULL) : PyObject_GetAttrString(o, name);
    if (!v)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

/* A torch-like tensor (data_ptr(), nbytes, is_contiguous(), device.type). Returns 1 when
 * `o` was one and *src is filled, 0 when `o` is not tensor-like, -1 with an exception. */
static int fc_from_tensor(PyObject *o, Py_ssize_t idx, fc_src *src)
{
    if (!PyObject_HasAttrString(o, "data_ptr") || !PyObject_HasAttrString(o, "is_contiguous"))
        return 0;
    PyObject *dev = PyObject_GetAttrString(o, "device");
    if (dev) {
        PyObject *type = PyObject_GetAttrString(dev, "type");
        Py_DECREF(dev);
        if (!type)
            return -1;
        int cpu = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cpu") == 0;
        Py_DECREF(type);
        if (!cpu) {
            PyErr_Format(PyExc_ValueError, "arrays[%zd] is not a CPU tensor", idx);
            return -1;
        }
    } else {
        PyErr_Clear();
    }
    PyObject *c = PyObject_CallMethod(o, "is_contiguous", NULL);
    if (!c)
        return -1;
    int contig = PyObject_IsTrue(c);
    Py_DECREF(c);
    if (contig < 0)
        return -1;
    if (!contig) {
        PyErr_Format(PyExc_ValueError, "arrays[%zd] is not C-contiguous", idx);
        return -1;
    }
    long long ptr, nbytes;
    if (fc_int_attr(o, "data_ptr", 1, &ptr) < 0 || fc_int_attr(o, "nbytes", 0, &nbytes) < 0)
        return -1;
    if (nbytes < 0 || (nbytes > 0 && ptr == 0)) {
        PyErr_Format(PyExc_ValueError, "arrays[%zd] has no valid data (data_ptr=%lld, nbytes=%lld)",
                     idx, ptr, nbytes);
        return -1;
    }
    src->ptr = (const char *)(uintptr_t)ptr;
    src->len = (size_t)nbytes;
    return 1;
}

/* An object with __array_interface__ (version 3). Same returns as fc_from_tensor. */
static int fc_from_array_interface(PyObject *o, Py_ssize_t idx, fc_src *src)
{
    PyObject *ai = PyObject_GetAttrString(o, "__array_interface__");
    if (!ai) {
        PyErr_Clear();
        return 0;
    }
    int rc = -1;
    if (!PyDict_Check(ai)) {
        PyErr_Format(PyExc_TypeError, "arrays[%zd].__array_interface__ is not a dict", idx);
        goto out;
    }
    PyObject *data = PyDict_GetItemString(ai, "data");     /* borrowed */
    PyObject *shape = PyDict_GetItemString(ai, "shape");   /* borrowed */
    PyObject *typestr = PyDict_GetItemString(ai, "typestr");
    PyObject *strides = PyDict_GetItemString(ai, "strides");
    if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) < 1 || !shape ||
        !PyTuple_Check(shape) || !typestr || !PyUnicode_Check(typestr)) {
        PyErr_Format(PyExc_TypeError,
                     "arrays[%zd].__array_interface__ needs data=(ptr, readonly), shape and "
                     "typestr", idx);
        goto out;
    }
    /* itemsize: the digits after the kind character, e.g. "<f4" */
    const char *ts = PyUnicode_AsUTF8(typestr);
    if (!ts)
        goto out;
    long long itemsize = strlen(ts) > 2 ? atoll(ts + 2) : 0;
    if (itemsize <= 0) {
        PyErr_Format(PyExc_ValueError, "arrays[%zd]: bad typestr %R", idx, typestr);
        goto out;
    }
    size_t n = (size_t)itemsize;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    long long dims[64];
    if (nd > 64) {
        PyErr_Format(PyExc_ValueError, "arrays[%zd]: too many dimensions (%zd)", idx, nd);
        goto out;
    }
    for (Py_ssize_t d = 0; d < nd; d++) {
        long long dim = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (dim == -1 && PyErr_Occurred())
            goto out;
        if (dim < 0) {
            PyErr_Format(PyExc_ValueError, "arrays[%zd]: negative dimension", idx);
            goto out;
        }
        dims[d] = dim;
        if (dim && n > SIZE_MAX / (size_t)dim) {
            PyErr_Format(PyExc_OverflowError, "arrays[%zd]: size overflows", idx);
            goto out;
        }
        n *= (size_t)dim;
    }
    if (strides && strides != Py_None && n > 0) {
        /* C-contiguous iff every stride equals the product of the later dims * itemsize
         * (dimensions of extent 1 may have any stride) */
        if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd) {
            PyErr_Format(PyExc_ValueError, "arrays[%zd]: bad strides", idx);
            goto out;
        }
        long long expect = itemsize;
        for (Py_ssize_t d = nd - 1; d >= 0; d--) {
            long long s = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d));
            if (s == -1 && PyErr_Occurred())
                goto out;
            if (dims[d] != 1 && s != expect) {
                PyErr_Format(PyExc_ValueError, "arrays[%zd] is not C-contiguous", idx);
                goto out;
            }
            expect *= dims[d];
        }
    }
    unsigned long long ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (ptr == (unsigned long long)-1 && PyErr_Occurred())
        goto out;
    if (n > 0 && ptr == 0) {
        PyErr_Format(PyExc_ValueError, "arrays[%zd] has a NULL data pointer", idx);
        goto out;
    }
    src->ptr = (const char *)(uintptr_t)ptr;
    src->len = n;
    rc = 1;
out:
    Py_DECREF(ai);
    return rc;
}

/* Fills src for item `o` (index idx). Returns 0 or -1 with an exception set. */
static int fc_source(PyObject *o, Py_ssize_t idx, fc_src *src)
{
    if (PyObject_CheckBuffer(o)) {
        if (PyObject_GetBuffer(o, &src->view, PyBUF_RECORDS_RO) < 0) {
            PyErr_Clear();
            if (PyObject_GetBuffer(o, &src->view, PyBUF_FULL_RO) < 0)
                return -1;
        }
        src->has_view = 1;
        if (!PyBuffer_IsContiguous(&src->view, 'C')) {
            PyErr_Format(PyExc_ValueError, "arrays[%zd] is not C-contiguous", idx);
            return -1;
        }
        src->ptr = src->view.buf;
        src->len = (size_t)src->view.len;
        return 0;
    }
    int r = fc_from_array_interface(o, idx, src);
    if (r == 0)
        r = fc_from_tensor(o, idx, src);
    if (r < 0)
        return -1;
    if (r == 0) {
        PyErr_Format(PyExc_TypeError,
                     "arrays[%zd] (%.100s) is not a buffer, an array or a CPU tensor", idx,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *fc_concat_arrays_into(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"arrays", "dest_ptr", "dest_size", "start", "count", "nthreads",
                             NULL};
    PyObject *arrays, *dest_obj;
    unsigned long long dest_size;
    Py_ssize_t start = 0, count = -1;
    int nthreads = 1;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOK|nni:concat_arrays_into", kwlist, &arrays,
                                     &dest_obj, &dest_size, &start, &count, &nthreads))
        return NULL;
    PyObject *seq = PySequence_Fast(arrays, "concat_arrays_into: arrays must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (start < 0)
        start = 0;
    if (start > n)
        start = n;
    if (count < 0 || count > n - start)
        count = n - start;
    if (count == 0) {
        Py_DECREF(seq);
        return PyLong_FromLong(0);
    }

    PyObject *res = NULL;
    Py_buffer dview;
    int has_dview = 0;
    char *dst = NULL;
    if (PyLong_Check(dest_obj)) {
        unsigned long long p = PyLong_AsUnsignedLongLong(dest_obj);
        if (p == (unsigned long long)-1 && PyErr_Occurred())
            goto out_seq;
        dst = (char *)(uintptr_t)p;
    } else if (PyObject_CheckBuffer(dest_obj)) {
        if (PyObject_GetBuffer(dest_obj, &dview, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Format(PyExc_TypeError,
                         "concat_arrays_into: dest_ptr must be an int address or a writable "
                         "C-contiguous buffer (%.100s is not)", Py_TYPE(dest_obj)->tp_name);
            goto out_seq;
        }
        has_dview = 1;
        if (dest_size > (unsigned long long)dview.len) {
            PyErr_Format(PyExc_ValueError,
                         "dest_size %llu is larger than the destination buffer (%zd bytes)",
                         dest_size, dview.len);
            goto out_seq;
        }
        dst = dview.buf;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "concat_arrays_into: dest_ptr must be an int address or a writable "
                     "buffer, not %.100s", Py_TYPE(dest_obj)->tp_name);
        goto out_seq;
    }

    fc_src *srcs = PyMem_Calloc((size_t)count, sizeof(*srcs));
    if (!srcs) {
        PyErr_NoMemory();
        goto out_seq;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (fc_source(PySequence_Fast_GET_ITEM(seq, start + i), start + i, &srcs[i]) < 0)
            goto out_srcs;
        if (srcs[i].len > SIZE_MAX - total) {
            PyErr_SetString(PyExc_OverflowError, "concat_arrays_into: total size overflows");
            goto out_srcs;
        }
        total += srcs[i].len;
    }
    if (total > dest_size) {
        PyErr_Format(PyExc_ValueError, "destination buffer too small: need %zu bytes, got %llu",
                     total, dest_size);
        goto out_srcs;
    }
    if (total > 0 && dst == NULL) {
        PyErr_SetString(PyExc_ValueError, "concat_arrays_into: dest_ptr is NULL");
        goto out_srcs;
    }

    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > FC_MAX_THREADS)
        nthreads = FC_MAX_THREADS;
    if ((size_t)nthreads > total)
        nthreads = total ? (int)total : 1;
    fc_work works[FC_MAX_THREADS];
    pthread_t tids[FC_MAX_THREADS];
    int started[FC_MAX_THREADS] = {0};
    size_t per = total / (size_t)nthreads;
    for (int t = 0; t < nthreads; t++) {
        works[t].srcs = srcs;
        works[t].nsrc = count;
        works[t].dst = dst;
        works[t].begin = per * (size_t)t;
        works[t].end = t == nthreads - 1 ? total : per * (size_t)(t + 1);
    }
    Py_BEGIN_ALLOW_THREADS
    for (int t = 1; t < nthreads; t++)
        started[t] = pthread_create(&tids[t], NULL, fc_copy_range, &works[t]) == 0;
    fc_copy_range(&works[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            fc_copy_range(&works[t]); /* no thread: copy its range here */
    }
    Py_END_ALLOW_THREADS
    res = PyLong_FromSize_t(total);

out_srcs:
    for (Py_ssize_t i = 0; i < count; i++) /* zeroed entries have no view */
        if (srcs[i].has_view)
            PyBuffer_Release(&srcs[i].view);
    PyMem_Free(srcs);
out_seq:
    if (has_dview)
        PyBuffer_Release(&dview);
    Py_DECREF(seq);
    return res;
}

static PyMethodDef fc_methods[] = {
    {"concat_arrays_into", (PyCFunction)(void (*)(void))fc_concat_arrays_into,
     METH_VARARGS | METH_KEYWORDS,
     "concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1) -> int\n\n"
     "Copy arrays[start:start+count] (buffers, numpy arrays, CPU torch tensors; each\n"
     "C-contiguous) back to back into dest_ptr (an address or a writable buffer) with the\n"
     "GIL released, split over nthreads threads. Returns the bytes copied. ValueError when\n"
     "a source is not C-contiguous or the sources need more than dest_size bytes."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot fc_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static PyModuleDef fc_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake._fast_copy",
    .m_doc = "Scatter-gather copy of many buffers into one destination, GIL released "
             "(upstream's mooncake._fast_copy).",
    .m_size = 0,
    .m_methods = fc_methods,
    .m_slots = fc_slots,
};

PyMODINIT_FUNC PyInit__fast_copy(void);
PyMODINIT_FUNC PyInit__fast_copy(void)
{
    return PyModuleDef_Init(&fc_def);
}
