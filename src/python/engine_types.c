/* engine_types.c: the small types of `mooncake.engine`: TransferNotify (a notification
 * sent with or received after a transfer) and InnerTransferEngine (the opaque handle
 * get_engine() returns; py_common.h says how mooncake.store reads it). No engine calls.
 * Upstream: TransferEnginePy::TransferNotify, InnerTransferEngine. */
#include "engine_py.h"

#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* TransferNotify                                                                      */
/* ------------------------------------------------------------------------------------ */

static int notify_check_text(const char *what, PyObject *v)
{
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete TransferNotify.%s", what);
        return -1;
    }
    if (!PyUnicode_Check(v) && !PyBytes_Check(v)) {
        PyErr_Format(PyExc_TypeError, "TransferNotify.%s must be str, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *notify_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    NotifyObject *self = (NotifyObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->name = PyUnicode_FromString("");
    self->msg = PyUnicode_FromString("");
    if (!self->name || !self->msg) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int notify_init(NotifyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "msg", NULL};
    PyObject *name = NULL, *msg = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:TransferNotify", kwlist, &name, &msg))
        return -1;
    if ((name == NULL) != (msg == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "TransferNotify() takes no arguments or both 'name' and 'msg'");
        return -1;
    }
    if (name) {
        if (notify_check_text("name", name) < 0 || notify_check_text("msg", msg) < 0)
            return -1;
        Py_INCREF(name);
        Py_SETREF(self->name, name);
        Py_INCREF(msg);
        Py_SETREF(self->msg, msg);
    }
    return 0;
}

static void notify_dealloc(NotifyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->name);
    Py_XDECREF(self->msg);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp); /* instances of a heap type hold a reference to it */
}

static PyObject *notify_get_name(NotifyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->name);
}

static int notify_set_name(NotifyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (notify_check_text("name", v) < 0)
        return -1;
    Py_INCREF(v);
    Py_SETREF(self->name, v);
    return 0;
}

static PyObject *notify_get_msg(NotifyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->msg);
}

static int notify_set_msg(NotifyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (notify_check_text("msg", v) < 0)
        return -1;
    Py_INCREF(v);
    Py_SETREF(self->msg, v);
    return 0;
}

static PyObject *notify_repr(NotifyObject *self)
{
    return PyUnicode_FromFormat("TransferNotify(name=%R, msg=%R)", self->name, self->msg);
}

static PyObject *notify_richcompare(PyObject *a, PyObject *b, int op)
{
    /* the slot runs for a TransferNotify on either side; find the state through it */
    PyObject *ours = a;
    mcpy_te_state *st = mcpy_te_state_of(ours);
    if (!st) {
        PyErr_Clear();
        ours = b;
        st = mcpy_te_state_of(ours);
        if (!st) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(a, st->notify_type) ||
        !PyObject_TypeCheck(b, st->notify_type))
        Py_RETURN_NOTIMPLEMENTED;
    NotifyObject *x = (NotifyObject *)a, *y = (NotifyObject *)b;
    int eq = PyObject_RichCompareBool(x->name, y->name, Py_EQ);
    if (eq < 0)
        return NULL;
    if (eq) {
        eq = PyObject_RichCompareBool(x->msg, y->msg, Py_EQ);
        if (eq < 0)
            return NULL;
    }
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

/* The UTF-8 bytes of a notify text (str with surrogateescape, or bytes as they are).
 * Returns a new bytes object or NULL with an exception. */
static PyObject *notify_text_bytes(PyObject *v)
{
    if (PyBytes_Check(v))
        return Py_NewRef(v);
    return PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
}

static PyGetSetDef notify_getset[] = {
    {"name", (getter)notify_get_name, (setter)notify_set_name,
     "str: the notification's name (upstream NotifyDesc.name).", NULL},
    {"msg", (getter)notify_get_msg, (setter)notify_set_msg,
     "str: the notification's message (upstream NotifyDesc.notify_msg). Received "
     "messages that are not valid UTF-8 keep their bytes as surrogate escapes: "
     "msg.encode('utf-8', 'surrogateescape') gives them back.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
static PyType_Slot notify_slots[] = {
    {Py_tp_doc, "TransferNotify() or TransferNotify(name: str, msg: str)\n\n"
              "A notification delivered to the peer after the data of transfer_sync / "
              "batch_transfer_sync (argument notify=) and returned by get_notifies(). "
              "name and msg are read/write str attributes (bytes are accepted too). "
              "Limits: name <= 4096 bytes, msg <= 1 MiB (UTF-8). "
              "Upstream: TransferEnginePy::TransferNotify."},
    {Py_tp_new, notify_new},
    {Py_tp_init, notify_init},
    {Py_tp_dealloc, notify_dealloc},
    {Py_tp_repr, notify_repr},
    {Py_tp_richcompare, notify_richcompare},
    {Py_tp_getset, notify_getset},
    {0, NULL},
};

PyType_Spec mcpy_notify_spec = {
    .name = "mooncake.engine.TransferNotify",
    .basicsize = sizeof(NotifyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = notify_slots,
};

int mcpy_arg_notify(mcpy_te_state *st, const char *fn, PyObject *o, notify_bytes *out)
{
    out->name = out->msg = NULL;
    if (!o || o == Py_None)
        return 0;
    if (!PyObject_TypeCheck(o, st->notify_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'notify' must be TransferNotify or None, not %.100s", fn,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    NotifyObject *n = (NotifyObject *)o;
    out->name = notify_text_bytes(n->name);
    if (!out->name)
        return -1;
    out->msg = notify_text_bytes(n->msg);
    if (!out->msg) {
        Py_CLEAR(out->name);
        return -1;
    }
    /* the name travels as a C string: an embedded NUL would cut it */
    if (strlen(PyBytes_AS_STRING(out->name)) != (size_t)PyBytes_GET_SIZE(out->name)) {
        PyErr_Format(PyExc_ValueError, "%s(): notify.name contains a NUL character", fn);
        Py_CLEAR(out->name);
        Py_CLEAR(out->msg);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* InnerTransferEngine: the opaque handle of get_engine()                              */
/* ------------------------------------------------------------------------------------ */

static void inner_dealloc(InnerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->capsule);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *inner_get_capsule(InnerObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->capsule);
}

static PyGetSetDef inner_getset[] = {
    {"_mc_te", (getter)inner_get_capsule, NULL,
     "PyCapsule named \"" MC_PY_TE_CAPSULE "\" holding the mc_te * (for mooncake.store).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot inner_slots[] = {
    {Py_tp_doc, "Opaque handle to an initialized transfer engine, returned by "
              "TransferEngine.get_engine() and accepted by "
              "mooncake.store.MooncakeDistributedStore.setup(engine=...). It keeps the "
              "TransferEngine alive. Cannot be created from Python. "
              "Upstream: InnerTransferEngine (shared_ptr<TransferEngine>)."},
    {Py_tp_dealloc, inner_dealloc},
    {Py_tp_getset, inner_getset},
    {0, NULL},
};

PyType_Spec mcpy_inner_spec = {
    .name = "mooncake.engine.InnerTransferEngine",
    .basicsize = sizeof(InnerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = inner_slots,
};
