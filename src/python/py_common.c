/* py_common.c: see py_common.h. Helpers both extension modules share: C-string and
 * enum conversions, ErrorCode, the log sink that forwards to Python `logging`, and the
 * engine handle (capsule) passed from mooncake.engine to mooncake.store. No module state. */
#include "py_common.h"

#include <stdbool.h>
#include <string.h>

#include "common/env.h"

#include "mooncake/log.h"
#include "mooncake/status.h"

int mc__py_cstr(const char *fn, const char *name, PyObject *o, int allow_none,
                const char **out)
{
    const char *s;
    Py_ssize_t n;
    if (o == Py_None && allow_none) {
        *out = NULL;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        s = PyUnicode_AsUTF8AndSize(o, &n);
        if (!s)
            return -1;
    } else if (PyBytes_Check(o)) {
        s = PyBytes_AS_STRING(o);
        n = PyBytes_GET_SIZE(o);
    } else {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be str%s, not %.100s", fn,
                     name, allow_none ? " or None" : "", Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s(): argument '%s' contains a NUL character", fn,
                     name);
        return -1;
    }
    *out = s;
    return 0;
}

PyObject *mc__py_int_enum(PyObject *module, const char *name, PyObject *members,
                          const char *doc)
{
    PyObject *enum_mod = NULL, *int_enum = NULL, *modname = NULL, *args = NULL;
    PyObject *kwargs = NULL, *cls = NULL;
    enum_mod = PyImport_ImportModule("enum");
    if (!enum_mod)
        goto out;
    int_enum = PyObject_GetAttrString(enum_mod, "IntEnum");
    modname = PyModule_GetNameObject(module);
    if (!int_enum || !modname)
        goto out;
    args = Py_BuildValue("(sO)", name, members);
    kwargs = Py_BuildValue("{sO}", "module", modname);
    if (!args || !kwargs)
        goto out;
    cls = PyObject_Call(int_enum, args, kwargs);
    if (!cls)
        goto out;
    PyObject *d = PyUnicode_FromString(doc);
    if (!d || PyObject_SetAttrString(cls, "__doc__", d) < 0)
        PyErr_Clear();
    Py_XDECREF(d);
out:
    Py_XDECREF(enum_mod);
    Py_XDECREF(int_enum);
    Py_XDECREF(modname);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return cls;
}

int mc__py_add_error_code(PyObject *module)
{
    size_t n;
    const mc_status_info *rows = mc_status_table(&n);
    PyObject *members = NULL, *cls = NULL;
    int rc = -1;

    members = PyList_New((Py_ssize_t)n);
    if (!members)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(si)", rows[i].name, rows[i].value);
        if (!pair)
            goto out;
        PyList_SET_ITEM(members, (Py_ssize_t)i, pair);
    }
    cls = mc__py_int_enum(module, "ErrorCode", members,
                          "Status codes of Mooncake with upstream's names and "
                          "numbers (mooncake-store/include/types.h). Methods "
                          "return these as negative ints.");
    if (!cls)
        goto out;
    if (PyModule_AddObjectRef(module, "ErrorCode", cls) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(members);
    Py_XDECREF(cls);
    return rc;
}

/* Called by log.c outside its lock, from any thread, with or without the GIL: the GIL
 * is taken here (PyGILState_Ensure is re-entrant for a thread that holds it). */
static void py_log_sink(mc_log_level level, const char *tag, const char *msg, void *ctx)
{
    (void)ctx;
    static const int py_levels[] = {5, 10, 20, 30, 40, 50};
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *logging = PyImport_ImportModule("logging");
    if (logging) {
        PyObject *logger = PyObject_CallMethod(logging, "getLogger", "s", "mooncake");
        if (logger) {
            PyObject *r = PyObject_CallMethod(logger, "log", "iss", py_levels[level],
                                              "%s", msg);
            (void)tag;
            Py_XDECREF(r);
            Py_DECREF(logger);
        }
        Py_DECREF(logging);
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    PyGILState_Release(g);
}

int mc__py_route_logs(void)
{
    /* Only when the user asked for it: stderr stays the default so that a process that
     * never configured logging still sees errors (as upstream's glog output). A value
     * that is not a boolean fails the import, naming the variable (common/env.h). */
    bool to_python;
    if (mc_env_bool("MC_LOG_TO_PYTHON", false, &to_python) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "MC_LOG_TO_PYTHON=%s: expected a boolean (1/0, true/false, yes/no, "
                     "on/off)", mc_env_str("MC_LOG_TO_PYTHON"));
        return -1;
    }
    if (to_python)
        mc_log_set_sink(py_log_sink, NULL);
    return 0;
}

static void engine_capsule_free(PyObject *cap)
{
    PyObject *owner = (PyObject *)PyCapsule_GetContext(cap);
    Py_XDECREF(owner);
}

PyObject *mc__py_engine_handle_new(struct mc_te *te, PyObject *owner)
{
    if (!te || !owner) {
        PyErr_SetString(PyExc_RuntimeError, "transfer engine is not initialized");
        return NULL;
    }
    PyObject *cap = PyCapsule_New(te, MC_PY_TE_CAPSULE, engine_capsule_free);
    if (!cap)
        return NULL;
    Py_INCREF(owner);
    if (PyCapsule_SetContext(cap, owner) < 0) {
        Py_DECREF(owner);
        Py_DECREF(cap);
        return NULL;
    }
    return cap;
}

int mc__py_engine_handle_get(PyObject *obj, struct mc_te **te, PyObject **keep)
{
    PyObject *cap = NULL;
    if (PyCapsule_IsValid(obj, MC_PY_TE_CAPSULE)) {
        cap = Py_NewRef(obj);
    } else {
        cap = PyObject_GetAttrString(obj, "_mc_te");
        if (!cap)
            PyErr_Clear();
        else if (!PyCapsule_IsValid(cap, MC_PY_TE_CAPSULE))
            Py_CLEAR(cap);
    }
    if (!cap) {
        PyErr_Format(PyExc_TypeError,
                     "setup(): engine must be None or the handle returned by "
                     "mooncake.engine.TransferEngine().get_engine(), not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *te = (struct mc_te *)PyCapsule_GetPointer(cap, MC_PY_TE_CAPSULE);
    *keep = cap;
    return 0;
}
