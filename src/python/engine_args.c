/* engine_args.c: the argument helpers of `mooncake.engine` (declared in engine_py.h):
 * unsigned ints, strings, int lists and opcodes, with TypeError messages naming the
 * method and the argument (as pybind11's casts). Pure conversions: no engine calls. */
#include "engine_py.h"

int mcpy_arg_u64(const char *fn, const char *name, PyObject *o, uint64_t *out)
{
    PyObject *idx = PyNumber_Index(o);
    if (!idx) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be an int, not %.100s", fn,
                     name, Py_TYPE(o)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be an int in [0, 2**64), got %R", fn, name,
                     idx);
        Py_DECREF(idx);
        return -1;
    }
    Py_DECREF(idx);
    *out = (uint64_t)v;
    return 0;
}

int mcpy_arg_str(const char *fn, const char *name, PyObject *o, int allow_none,
                   const char **out)
{
    return mc__py_cstr(fn, name, o, allow_none, out);
}

int mcpy_arg_u64_list(const char *fn, const char *name, PyObject *o, uint64_t **out,
                        size_t *n)
{
    *out = NULL;
    *n = 0;
    if (PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
        !PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a list of ints, not %.100s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    /* a list or tuple as it is; any other sequence (numpy array) copied to a list */
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a list of ints, not %.100s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    uint64_t *v = NULL;
    if (len > 0) {
        v = PyMem_Malloc((size_t)len * sizeof(*v));
        if (!v) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *idx = PyNumber_Index(items[i]);
        unsigned long long x = 0;
        if (idx) {
            x = PyLong_AsUnsignedLongLong(idx);
            if (x == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s(): argument '%s'[%zd] must be an int in [0, 2**64), got %R",
                             fn, name, i, idx);
                Py_DECREF(idx);
                goto bad;
            }
            Py_DECREF(idx);
        } else {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s'[%zd] must be an int, not %.100s", fn, name, i,
                         Py_TYPE(items[i])->tp_name);
            goto bad;
        }
        v[i] = (uint64_t)x;
    }
    Py_DECREF(seq);
    *out = v;
    *n = (size_t)len;
    return 0;
bad:
    Py_DECREF(seq);
    PyMem_Free(v);
    return -1;
}


int mcpy_arg_opcode(const char *fn, PyObject *o, int *out)
{
    uint64_t v;
    if (mcpy_arg_u64(fn, "opcode", o, &v) < 0 || v > 1) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'opcode' must be TransferOpcode.Read or "
                     "TransferOpcode.Write, not %R",
                     fn, o);
        return -1;
    }
    *out = v == 0 ? MC_TE_OP_READ : MC_TE_OP_WRITE;
    return 0;
}
