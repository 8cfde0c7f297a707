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
 *
 * export_arrow_u8(buffer, requested_schema=None) -> (schema capsule, array capsule) and
 * pillow_arrow_view(image) -> read-only uint8 ndarray (upstream's newer releases ship both
 * in the same module; behaviour as they document it): the first exports any C-contiguous
 * buffer as an Arrow uint8 array through the Arrow C Data Interface's PyCapsule protocol
 * without copying (the buffer view is held until the consumer calls release, which may
 * happen on any thread: it takes the GIL); the second takes over (moves) the ArrowArray a
 * Pillow image exports and views its pixel bytes, released when the view goes. The Arrow
 * structs are the published ABI (see below); the code is ours.
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

/* ================================================================================== */
/* Arrow C Data Interface helpers (upstream mooncake/_fast_copy.c, newer releases:     */
/* export_arrow_u8, pillow_arrow_view).                                                */
/* ================================================================================== */

/* The two structs of the Arrow C Data Interface (a stable ABI published by Apache
 * Arrow: arrow.apache.org/docs/format/CDataInterface.html); the guard is the one the
 * specification gives, so a translation unit that already has them keeps its own. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_NULLABLE 2
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

/* What an exported byte array owns (its private_data): the buffer pointers (validity:
 * none, then the data) and the Python buffer view that keeps the bytes alive. The
 * ArrowArray itself is a separate allocation that belongs to its capsule: a consumer may
 * move the struct out (copy it, mark the capsule's copy released) and release the copy
 * later from any thread, after the capsule is gone. */
typedef struct {
    const void *bufs[2];
    Py_buffer view;
} fc_u8_export;

static void fc_u8_release(struct ArrowArray *a)
{
    if (!a || !a->release)
        return;
    fc_u8_export *e = a->private_data;
    a->release = NULL; /* the specification: a released struct has release NULL */
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release(&e->view);
    PyGILState_Release(g);
    PyMem_RawFree(e);
}

static void fc_schema_release(struct ArrowSchema *s)
{
    if (s)
        s->release = NULL; /* static strings, nothing owned */
}

/* Capsule destructors: release what no consumer took, then free the capsule's struct. */
static void fc_array_capsule_free(PyObject *cap)
{
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (!a) {
        PyErr_Clear();
        return;
    }
    if (a->release) /* not moved out by a consumer */
        a->release(a);
    PyMem_RawFree(a);
}

static void fc_schema_capsule_free(PyObject *cap)
{
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (!s) {
        PyErr_Clear();
        return;
    }
    if (s->release)
        s->release(s);
    PyMem_RawFree(s);
}

/* export_arrow_u8(buffer, requested_schema=None) -> (schema capsule, array capsule) */
static PyObject *fc_export_arrow_u8(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer", "requested_schema", NULL};
    PyObject *obj, *requested = Py_None;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:export_arrow_u8", kwlist, &obj, &requested))
        return NULL;
    if (requested != Py_None && !PyCapsule_IsValid(requested, "arrow_schema")) {
        PyErr_SetString(PyExc_TypeError,
                        "export_arrow_u8: requested_schema must be None or an "
                        "'arrow_schema' capsule");
        return NULL;
    }
    /* a requested schema is only a hint in the PyCapsule protocol: the bytes are
     * always exported as uint8 ("C") */
    fc_u8_export *e = PyMem_RawCalloc(1, sizeof(*e));
    struct ArrowArray *a = PyMem_RawCalloc(1, sizeof(*a));
    struct ArrowSchema *sc = PyMem_RawCalloc(1, sizeof(*sc));
    PyObject *scap = NULL, *acap = NULL, *res = NULL;
    if (!e || !a || !sc) {
        PyMem_RawFree(e), PyMem_RawFree(a), PyMem_RawFree(sc);
        return PyErr_NoMemory();
    }
    if (PyObject_GetBuffer(obj, &e->view, PyBUF_C_CONTIGUOUS) < 0) {
        PyMem_RawFree(e), PyMem_RawFree(a), PyMem_RawFree(sc);
        return NULL;
    }
    static const char empty[1];
    e->bufs[0] = NULL; /* no validity bitmap: null_count is 0 */
    e->bufs[1] = e->view.len ? e->view.buf : (const void *)empty;
    a->length = (int64_t)e->view.len;
    a->n_buffers = 2;
    a->buffers = e->bufs;
    a->release = fc_u8_release;
    a->private_data = e;
    sc->format = "C"; /* uint8 */
    sc->name = "";
    sc->flags = ARROW_FLAG_NULLABLE;
    sc->release = fc_schema_release;
    scap = PyCapsule_New(sc, "arrow_schema", fc_schema_capsule_free);
    if (!scap) {
        PyMem_RawFree(sc);
        fc_u8_release(a);
        PyMem_RawFree(a);
        return NULL;
    }
    acap = PyCapsule_New(a, "arrow_array", fc_array_capsule_free);
    if (!acap) {
        fc_u8_release(a);
        PyMem_RawFree(a);
        Py_DECREF(scap);
        return NULL;
    }
    res = PyTuple_Pack(2, scap, acap);
    Py_DECREF(scap);
    Py_DECREF(acap);
    return res;
}

/* The pixels of a Pillow image, taken over from its Arrow export: the moved ArrowArray
 * (released with this object) and its data bytes, exported read-only. */
typedef struct {
    PyObject_HEAD
    struct ArrowArray array; /* moved from Pillow's capsule; released in dealloc */
    const char *data;
    Py_ssize_t len;
} fc_pixels;

static void fc_pixels_dealloc(PyObject *o)
{
    fc_pixels *p = (fc_pixels *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (p->array.release)
        p->array.release(&p->array);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static int fc_pixels_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
    fc_pixels *p = (fc_pixels *)o;
    static char empty[1];
    return PyBuffer_FillInfo(view, o, p->len ? (void *)p->data : empty, p->len, 1, flags);
}

static PyType_Slot fc_pixels_slots[] = {
    {Py_tp_dealloc, fc_pixels_dealloc},
    {Py_bf_getbuffer, fc_pixels_getbuffer},
    {Py_tp_doc, "Pixel bytes of a Pillow image held through its Arrow export (read-only)."},
    {0, NULL},
};

static PyType_Spec fc_pixels_spec = {
    .name = "mooncake._fast_copy._ArrowPixels",
    .basicsize = sizeof(fc_pixels),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = fc_pixels_slots,
};

typedef struct {
    PyTypeObject *pixels_type;
} fc_state;

/* Checks the layout Pillow exports (a fixed-size list "+w:<n>" of one uint8 child, one
 * entry per pixel, or plain uint8 "C") and returns the byte count and data pointer. */
static int fc_pixel_layout(const struct ArrowSchema *s, const struct ArrowArray *a,
                           const char **data, Py_ssize_t *len)
{
    const struct ArrowSchema *cs = s;
    const struct ArrowArray *ca = a;
    if (!s->format || !a->release)
        return -1;
    if (strncmp(s->format, "+w:", 3) == 0) {
        char *end;
        long width = strtol(s->format + 3, &end, 10);
        if (*end || width <= 0 || s->n_children != 1 || a->n_children != 1 || !s->children ||
            !a->children || !s->children[0] || !a->children[0] || a->offset != 0 ||
            a->null_count != 0 || a->length < 0 || a->length > INT64_MAX / width ||
            (a->n_buffers >= 1 && a->buffers && a->buffers[0]))
            return -1;
        cs = s->children[0];
        ca = a->children[0];
        if (ca->length != a->length * width)
            return -1;
    }
    if (!cs->format || strcmp(cs->format, "C") != 0 || cs->n_children != 0 ||
        ca->n_children != 0 || ca->n_buffers != 2 || !ca->buffers || ca->buffers[0] ||
        ca->offset != 0 || ca->null_count != 0 || ca->length < 0 ||
        (ca->length > 0 && !ca->buffers[1]) || ca->length > PY_SSIZE_T_MAX || cs->dictionary ||
        ca->dictionary)
        return -1;
    *data = ca->buffers[1];
    *len = (Py_ssize_t)ca->length;
    return 0;
}

/* pillow_arrow_view(image) -> read-only numpy uint8 array over the image's pixels */
static PyObject *fc_pillow_arrow_view(PyObject *mod, PyObject *image)
{
    fc_state *st = PyModule_GetState(mod);
    PyObject *caps = PyObject_CallMethod(image, "__arrow_c_array__", NULL);
    if (!caps) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "pillow_arrow_view: %.100s has no Arrow export (__arrow_c_array__); "
                         "it needs a Pillow image (Pillow >= 11.2)", Py_TYPE(image)->tp_name);
        }
        return NULL;
    }
    struct ArrowSchema *s = NULL;
    struct ArrowArray *a = NULL;
    if (PyTuple_Check(caps) && PyTuple_GET_SIZE(caps) == 2) {
        s = PyCapsule_GetPointer(PyTuple_GET_ITEM(caps, 0), "arrow_schema");
        a = s ? PyCapsule_GetPointer(PyTuple_GET_ITEM(caps, 1), "arrow_array") : NULL;
    }
    if (!s || !a) {
        Py_DECREF(caps);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "pillow_arrow_view: __arrow_c_array__ did not return "
                            "(schema, array) capsules");
        return NULL;
    }
    const char *data;
    Py_ssize_t len;
    if (!s->release || fc_pixel_layout(s, a, &data, &len) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "pillow_arrow_view: unsupported Arrow layout %.40s (expected uint8 "
                     "pixels: \"C\" or \"+w:<n>\" of \"C\")", s->format ? s->format : "?");
        Py_DECREF(caps);
        return NULL;
    }
    fc_pixels *px = PyObject_New(fc_pixels, st->pixels_type);
    if (!px) {
        Py_DECREF(caps);
        return NULL;
    }
    px->array = *a;     /* move (Arrow specification: copy, then mark the source */
    a->release = NULL;  /* released); the capsule then frees only its struct */
    px->data = data;
    px->len = len;
    Py_DECREF(caps);
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) { /* without numpy: a read-only memoryview */
        PyErr_Clear();
        PyObject *mv = PyMemoryView_FromObject((PyObject *)px);
        Py_DECREF(px);
        return mv;
    }
    PyObject *arr = PyObject_CallMethod(np, "frombuffer", "Os", (PyObject *)px, "uint8");
    Py_DECREF(np);
    Py_DECREF(px);
    return arr;
}

static PyMethodDef fc_methods[] = {
    {"concat_arrays_into", (PyCFunction)(void (*)(void))fc_concat_arrays_into,
     METH_VARARGS | METH_KEYWORDS,
     "concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1) -> int\n\n"
     "Copy arrays[start:start+count] (buffers, numpy arrays, CPU torch tensors; each\n"
     "C-contiguous) back to back into dest_ptr (an address or a writable buffer) with the\n"
     "GIL released, split over nthreads threads. Returns the bytes copied. ValueError when\n"
     "a source is not C-contiguous or the sources need more than dest_size bytes."},
    {"export_arrow_u8", (PyCFunction)(void (*)(void))fc_export_arrow_u8,
     METH_VARARGS | METH_KEYWORDS,
     "export_arrow_u8(buffer, requested_schema=None) -> (schema_capsule, array_capsule)\n\n"
     "Export the bytes of a C-contiguous buffer, without copying, as an Arrow uint8 array\n"
     "through the Arrow PyCapsule interface (capsules 'arrow_schema' and 'arrow_array', as\n"
     "__arrow_c_array__ returns them; e.g. pyarrow.Array._import_from_c_capsule). The\n"
     "buffer stays referenced until the consumer releases the array. requested_schema is\n"
     "accepted and ignored (the export is always uint8)."},
    {"pillow_arrow_view", fc_pillow_arrow_view, METH_O,
     "pillow_arrow_view(image) -> numpy.ndarray\n\n"
     "A read-only flat uint8 array over a Pillow image's pixel storage, without copying,\n"
     "through the image's Arrow export (Pillow >= 11.2: __arrow_c_array__). The pixels stay\n"
     "alive as long as the array. TypeError for an object without an Arrow export,\n"
     "ValueError for a layout other than uint8 pixels (\"C\", or \"+w:<n>\" of \"C\")."},
    {NULL, NULL, 0, NULL},
};

static int fc_exec(PyObject *m)
{
    fc_state *st = PyModule_GetState(m);
    st->pixels_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &fc_pixels_spec, NULL);
    return st->pixels_type ? 0 : -1;
}

static int fc_traverse(PyObject *m, visitproc visit, void *arg)
{
    fc_state *st = PyModule_GetState(m);
    Py_VISIT(st ? st->pixels_type : NULL);
    return 0;
}

static int fc_clear(PyObject *m)
{
    fc_state *st = PyModule_GetState(m);
    if (st)
        Py_CLEAR(st->pixels_type);
    return 0;
}

static void fc_free(void *m)
{
    fc_clear((PyObject *)m);
}

static PyModuleDef_Slot fc_slots[] = {
    {Py_mod_exec, fc_exec},
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
    .m_size = sizeof(fc_state),
    .m_methods = fc_methods,
    .m_slots = fc_slots,
    .m_traverse = fc_traverse,
    .m_clear = fc_clear,
    .m_free = fc_free,
};

PyMODINIT_FUNC PyInit__fast_copy(void);
PyMODINIT_FUNC PyInit__fast_copy(void)
{
    return PyModuleDef_Init(&fc_def);
}
