/* store_tasks.c: replica copy / move tasks on MooncakeDistributedStore
 * (create_copy_task, create_move_task, query_task; upstream store_py.cpp, shapes in
 * upstream-mooncake.md §1.4) and the module-level TaskType, TaskStatus and
 * QueryTaskResponse. A UUID is a Python tuple (hi, lo) of two ints, as upstream's
 * pybind11 cast of std::pair<uint64_t, uint64_t>. The classes are looked up in the module
 * on each call (no Python object in a C static). */
#include "store_py.h"

#include <stddef.h>
#include <string.h>

#include <structmember.h>

typedef struct {
    const char *name;
    int value;
} row;

static const row type_rows[] = {{"REPLICA_COPY", 0}, {"REPLICA_MOVE", 1}};
static const row status_rows[] = {
    {"PENDING", 0}, {"PROCESSING", 1}, {"SUCCESS", 2}, {"FAILED", 3}};

/* QueryTaskResponse: a heap type with read-only attributes, made by query_task only. */
typedef struct {
    PyObject_HEAD
    PyObject *v[7]; /* id, type, status, created, updated, assigned_client, message */
} resp_object;

#define RESP_M(name, i, doc)                                                                \
    {name, T_OBJECT_EX, offsetof(resp_object, v) + (i) * sizeof(PyObject *), READONLY, doc}

static PyMemberDef resp_members[] = {
    RESP_M("id", 0, "tuple: the task's UUID (hi, lo)"),
    RESP_M("type", 1, "TaskType: copy or move"),
    RESP_M("status", 2, "TaskStatus: PENDING, PROCESSING, SUCCESS or FAILED"),
    RESP_M("created_at_ms_epoch", 3, "int: creation time, ms since the epoch"),
    RESP_M("last_updated_at_ms_epoch", 4, "int: last state change, ms since the epoch"),
    RESP_M("assigned_client", 5, "tuple: UUID (hi, lo) of the client executing it"),
    RESP_M("message", 6, "str: why it failed ('' otherwise)"),
    {NULL, 0, 0, 0, NULL},
};

static int resp_traverse(PyObject *o, visitproc visit, void *arg)
{
    for (int i = 0; i < 7; i++)
        Py_VISIT(((resp_object *)o)->v[i]);
    Py_VISIT(Py_TYPE(o));
    return 0;
}

static int resp_clear(PyObject *o)
{
    for (int i = 0; i < 7; i++)
        Py_CLEAR(((resp_object *)o)->v[i]);
    return 0;
}

static void resp_dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    resp_clear(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyObject *resp_repr(PyObject *o)
{
    resp_object *r = (resp_object *)o;
    return PyUnicode_FromFormat("<QueryTaskResponse id=%R type=%R status=%R message=%R>",
                                r->v[0], r->v[1], r->v[2], r->v[6]);
}

static PyType_Slot resp_slots[] = {
    {Py_tp_doc, "A replica task's state (upstream QueryTaskResponse), from query_task; "
                "read-only attributes."},
    {Py_tp_members, resp_members},
    {Py_tp_traverse, resp_traverse},
    {Py_tp_clear, resp_clear},
    {Py_tp_dealloc, resp_dealloc},
    {Py_tp_repr, resp_repr},
    {0, NULL},
};

static PyType_Spec resp_spec = {
    "mooncake.store.QueryTaskResponse", sizeof(resp_object), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION, resp_slots};

static PyObject *make_enum(PyObject *module, const char *name, const char *doc, const row *rows,
                           size_t n)
{
    PyObject *members = PyList_New((Py_ssize_t)n);
    if (!members)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(si)", rows[i].name, rows[i].value);
        if (!pair) {
            Py_DECREF(members);
            return NULL;
        }
        PyList_SET_ITEM(members, (Py_ssize_t)i, pair);
    }
    PyObject *cls = mc__py_int_enum(module, name, members, doc);
    Py_DECREF(members);
    return cls;
}

int mcpy_tasks_init(PyObject *module)
{
    PyObject *t = make_enum(module, "TaskType", "Replica task kinds (upstream TaskType).",
                            type_rows, 2);
    if (!t || PyModule_AddObject(module, "TaskType", t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    PyObject *s = make_enum(module, "TaskStatus", "Replica task states (upstream TaskStatus).",
                            status_rows, 4);
    if (!s || PyModule_AddObject(module, "TaskStatus", s) < 0) {
        Py_XDECREF(s);
        return -1;
    }
    PyObject *r = PyType_FromModuleAndSpec(module, &resp_spec, NULL);
    if (!r || PyModule_AddObject(module, "QueryTaskResponse", r) < 0) {
        Py_XDECREF(r);
        return -1;
    }
    return 0;
}

/* The module attribute `name` of self's module. New reference or NULL. */
static PyObject *module_attr(PyObject *self, const char *name)
{
    PyObject *m = PyType_GetModuleByDef(Py_TYPE(self), &mcpy_store_def);
    return m ? PyObject_GetAttrString(m, name) : NULL;
}

static PyObject *uuid_tuple(const uint64_t id[2])
{
    return Py_BuildValue("(KK)", (unsigned long long)id[0], (unsigned long long)id[1]);
}

static PyObject *id_result(const uint64_t id[2], int rc)
{
    uint64_t zero[2] = {0, 0};
    return Py_BuildValue("(Ni)", uuid_tuple(rc == 0 ? id : zero), rc);
}

/* A string argument without NUL into buf (< MC_STORE_NAME_MAX bytes). 0 or -1. */
static int name_arg(PyObject *o, const char *fn, const char *arg, char *buf, size_t cap)
{
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be str, not %.100s", fn, arg,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s)
        return -1;
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s(): argument '%s' must not contain NUL", fn, arg);
        return -1;
    }
    if ((size_t)n >= cap) {
        buf[0] = '\0'; /* too long: the store refuses it with INVALID_PARAMS */
        return 0;
    }
    memcpy(buf, s, (size_t)n + 1);
    return 0;
}

/* create_copy_task(key, targets: List[str]) -> ((hi, lo), code). */
static PyObject *store_create_copy_task(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "targets", NULL};
    PyObject *ko, *to;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:create_copy_task", kw, &ko, &to))
        return NULL;
    mc_store_key key;
    if (mcpy_key(ko, "create_copy_task", "key", &key) < 0)
        return NULL;
    if (!PyList_Check(to) && !PyTuple_Check(to)) {
        PyErr_Format(PyExc_TypeError,
                     "create_copy_task(): argument 'targets' must be a list of str, not %.100s",
                     Py_TYPE(to)->tp_name);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(to, "targets");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t cnt = n > 8 ? 9 : (size_t)n; /* more than 8: refused by the store */
    char (*names)[MC_STORE_NAME_MAX] = PyMem_Calloc(cnt ? cnt : 1, MC_STORE_NAME_MAX);
    const char *ptrs[9];
    if (!names) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < cnt; i++) {
        if (name_arg(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), "create_copy_task",
                     "targets", names[i], MC_STORE_NAME_MAX) < 0) {
            PyMem_Free(names);
            Py_DECREF(seq);
            return NULL;
        }
        ptrs[i] = names[i];
    }
    Py_INCREF(ko); /* the key borrows from it */
    uint64_t id[2] = {0, 0};
    int rc;
    mc_store *st = ((mcpy_store *)self)->store;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_create_copy_task(st, key.data, key.len, ptrs, cnt, id);
    Py_END_ALLOW_THREADS
    Py_DECREF(ko);
    PyMem_Free(names);
    Py_DECREF(seq);
    return id_result(id, rc);
}

/* create_move_task(key, source, target) -> ((hi, lo), code). */
static PyObject *store_create_move_task(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"key", "source", "target", NULL};
    PyObject *ko, *so, *to;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:create_move_task", kw, &ko, &so, &to))
        return NULL;
    mc_store_key key;
    char src[MC_STORE_NAME_MAX], dst[MC_STORE_NAME_MAX];
    if (mcpy_key(ko, "create_move_task", "key", &key) < 0 ||
        name_arg(so, "create_move_task", "source", src, sizeof src) < 0 ||
        name_arg(to, "create_move_task", "target", dst, sizeof dst) < 0)
        return NULL;
    Py_INCREF(ko);
    uint64_t id[2] = {0, 0};
    int rc;
    mc_store *st = ((mcpy_store *)self)->store;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_create_move_task(st, key.data, key.len, src, dst, id);
    Py_END_ALLOW_THREADS
    Py_DECREF(ko);
    return id_result(id, rc);
}

/* query_task(task_id: (hi, lo)) -> (QueryTaskResponse, 0) or (None, code). */
static PyObject *store_query_task(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"task_id", NULL};
    PyObject *io;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:query_task", kw, &io))
        return NULL;
    uint64_t id[2];
    if (!PyTuple_Check(io) || PyTuple_GET_SIZE(io) != 2 ||
        mcpy_u64(PyTuple_GET_ITEM(io, 0), "query_task", "task_id", &id[0]) < 0 ||
        mcpy_u64(PyTuple_GET_ITEM(io, 1), "query_task", "task_id", &id[1]) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "query_task(): argument 'task_id' must be a tuple (hi, lo) of ints");
        return NULL;
    }
    mc_store_task_info t;
    int rc;
    mc_store *st = ((mcpy_store *)self)->store;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_store_query_task(st, id, &t);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return Py_BuildValue("(Oi)", Py_None, rc);
    PyObject *cls = module_attr(self, "QueryTaskResponse");
    PyObject *tt = module_attr(self, "TaskType"), *ts = module_attr(self, "TaskStatus");
    PyObject *r = NULL;
    if (cls && tt && ts) {
        r = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
        PyObject *v[7] = {uuid_tuple(t.id),
                          PyObject_CallFunction(tt, "i", t.type),
                          PyObject_CallFunction(ts, "i", t.status),
                          PyLong_FromUnsignedLongLong(t.created_at_ms_epoch),
                          PyLong_FromUnsignedLongLong(t.last_updated_at_ms_epoch),
                          uuid_tuple(t.assigned_client),
                          PyUnicode_DecodeUTF8(t.message, (Py_ssize_t)strlen(t.message),
                                               "replace")};
        for (int i = 0; i < 7; i++) {
            if (!v[i] || !r) {
                Py_CLEAR(r);
                Py_XDECREF(v[i]);
                continue;
            }
            ((resp_object *)r)->v[i] = v[i];
        }
    }
    Py_XDECREF(cls);
    Py_XDECREF(tt);
    Py_XDECREF(ts);
    if (!r)
        return NULL;
    return Py_BuildValue("(Ni)", r, 0);
}

PyMethodDef mcpy_task_methods[] = {
    MCPY_M("create_copy_task", store_create_copy_task,
           "create_copy_task(key: key, targets: List[str]) -> tuple: ((hi, lo), code): a task adding a replica of "
           "key on each target segment; code 0 or an error (then the id is (0, 0))."),
    MCPY_M("create_move_task", store_create_move_task,
           "create_move_task(key: key, source: str, target: str) -> tuple: ((hi, lo), code): a task moving key's "
           "replica from segment source to segment target."),
    MCPY_M("query_task", store_query_task,
           "query_task(task_id: tuple) -> tuple: (QueryTaskResponse, 0) or (None, code), e.g. -1400 "
           "TASK_NOT_FOUND."),
    {NULL, NULL, 0, NULL},
};
