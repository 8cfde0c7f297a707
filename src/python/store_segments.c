/* store_segments.c: segment management of MooncakeDistributedStore: mount_segment,
 * unmount_segment, allocate_and_mount_segment, unmount_and_free_segment (the C side is
 * src/client/segments.c). Shapes as upstream store_py.cpp / RealClient: the mounts return
 * a dict {"ret": int, "segment_ids": [str]} (allocate_and_mount_segment adds
 * "allocated_size"), the unmounts an int (0 or the first failing id's code). */
#include "store_py.h"

#include "mooncake/status.h"

#define MAX_IDS 4096 /* segment ids per unmount call */

static PyObject *mount_result(int ret, const char *id, int with_size, uint64_t allocated)
{
    PyObject *ids = PyList_New(0);
    if (!ids)
        return NULL;
    if (ret == MC_OK) {
        PyObject *s = PyUnicode_FromString(id);
        if (!s || PyList_Append(ids, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(ids);
            return NULL;
        }
        Py_DECREF(s);
    }
    if (with_size)
        return Py_BuildValue("{s:i,s:N,s:K}", "ret", ret, "segment_ids", ids,
                             "allocated_size", (unsigned long long)allocated);
    return Py_BuildValue("{s:i,s:N}", "ret", ret, "segment_ids", ids);
}

static const char *opt_str(PyObject *o, const char *fn, const char *arg)
{
    if (!o || o == Py_None)
        return "";
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be str, not %.50s", fn, arg,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8(o);
}

static PyObject *store_mount_segment(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"path", "size", "offset", "protocol", "location", NULL};
    PyObject *a_path, *a_size, *a_off = NULL, *a_proto = NULL, *a_loc = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO|OOO:mount_segment", kw, &a_path, &a_size,
                                     &a_off, &a_proto, &a_loc))
        return NULL;
    uint64_t size, off = 0;
    const char *path = PyUnicode_AsUTF8(a_path), *proto, *loc;
    if (!path || mcpy_u64(a_size, "mount_segment", "size", &size) < 0 ||
        (a_off && mcpy_u64(a_off, "mount_segment", "offset", &off) < 0) ||
        !(proto = opt_str(a_proto, "mount_segment", "protocol")) ||
        !(loc = opt_str(a_loc, "mount_segment", "location")))
        return NULL;
    char id[MC_STORE_SEGMENT_ID_LEN];
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_mount_segment(((mcpy_store *)o)->store, path, size, off, proto, loc, id);
    Py_END_ALLOW_THREADS
    return mount_result(r, id, 0, 0);
}

static PyObject *store_allocate_and_mount(PyObject *o, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"size", "protocol", "location", NULL};
    PyObject *a_size, *a_proto = NULL, *a_loc = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:allocate_and_mount_segment", kw, &a_size,
                                     &a_proto, &a_loc))
        return NULL;
    uint64_t size, got = 0;
    const char *proto, *loc;
    if (mcpy_u64(a_size, "allocate_and_mount_segment", "size", &size) < 0 ||
        !(proto = opt_str(a_proto, "allocate_and_mount_segment", "protocol")) ||
        !(loc = opt_str(a_loc, "allocate_and_mount_segment", "location")))
        return NULL;
    char id[MC_STORE_SEGMENT_ID_LEN];
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mc_store_allocate_and_mount_segment(((mcpy_store *)o)->store, size, proto, loc, id,
                                            &got);
    Py_END_ALLOW_THREADS
    return mount_result(r, id, 1, got);
}

/* unmount_segment / unmount_and_free_segment(segment_ids, grace_period_seconds=0). */
static PyObject *unmount_common(PyObject *o, PyObject *args, PyObject *kwds, const char *fn)
{
    static char *kw[] = {"segment_ids", "grace_period_seconds", NULL};
    PyObject *a_ids, *a_grace = NULL;
    char spec[64];
    snprintf(spec, sizeof spec, "O|O:%s", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, spec, kw, &a_ids, &a_grace))
        return NULL;
    long long grace = 0;
    if (a_grace && mcpy_int(a_grace, fn, "grace_period_seconds", 0, 24 * 3600, &grace) < 0)
        return NULL;
    PyObject *seq = PyUnicode_Check(a_ids) ? Py_BuildValue("(O)", a_ids)
                                           : PySequence_Tuple(a_ids);
    if (!seq) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'segment_ids' must be a list of str", fn);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > MAX_IDS) {
        Py_DECREF(seq);
        return PyLong_FromLong(MC_INVALID_PARAMS);
    }
    const char **ids = PyMem_Calloc((size_t)n + 1, sizeof *ids);
    if (!ids) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(seq, i);
        if (!PyUnicode_Check(it) || !(ids[i] = PyUnicode_AsUTF8(it))) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError,
                             "%s(): argument 'segment_ids' must be a list of str", fn);
            PyMem_Free(ids);
            Py_DECREF(seq);
            return NULL;
        }
    }
    int first = MC_OK;
    mc_store *st = ((mcpy_store *)o)->store;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = mc_store_unmount_segment(st, ids[i], (uint64_t)grace * 1000);
        if (r != MC_OK && first == MC_OK)
            first = r;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(ids);
    Py_DECREF(seq);
    return PyLong_FromLong(first);
}

static PyObject *store_unmount_segment(PyObject *o, PyObject *args, PyObject *kwds)
{
    return unmount_common(o, args, kwds, "unmount_segment");
}

static PyObject *store_unmount_and_free(PyObject *o, PyObject *args, PyObject *kwds)
{
    return unmount_common(o, args, kwds, "unmount_and_free_segment");
}

PyMethodDef mcpy_segment_methods[] = {
    MCPY_M("mount_segment", store_mount_segment,
      "mount_segment(path: str, size: int, offset: int = 0, protocol: str = \"tcp\", "
      "location: str = \"\") -> dict[str, Any]: {\"ret\": int, \"segment_ids\": list[str]}; maps "
      "[offset, offset+size) of an existing file or /dev/shm object (offset page-aligned), "
      "registers it with the engine and mounts it on the master as one more segment of "
      "this client. ret 0 (one id) or negative (no ids)."),
    MCPY_M("unmount_segment", store_unmount_segment,
      "unmount_segment(segment_ids: list[str], grace_period_seconds: int = 0) -> int: 0 "
      "or the first failing id's code (-101 unknown id). With a grace period the segment "
      "takes no new allocation at once but its objects stay readable for that many "
      "seconds; then the master drops them and the memory is released."),
    MCPY_M("allocate_and_mount_segment", store_allocate_and_mount,
      "allocate_and_mount_segment(size: int, protocol: str = \"tcp\", location: str = \"\") "
      "-> dict[str, Any]: {\"ret\", \"segment_ids\", \"allocated_size\"}; allocates size bytes of "
      "shared memory and mounts them as one more segment of this client."),
    MCPY_M("unmount_and_free_segment", store_unmount_and_free,
      "unmount_and_free_segment(segment_ids: list[str], grace_period_seconds: int = 0) -> "
      "int: as unmount_segment; the memory is freed (after the grace period)."),
    {NULL, NULL, 0, NULL},
};
