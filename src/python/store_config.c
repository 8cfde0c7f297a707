/* store_config.c: ReplicateConfig, the per-put placement options of `mooncake.store`
 * (upstream replica.h; ../shared/reference/upstream-mooncake.md §1.2), and its conversion
 * to mc_store_replicate_config. Owns no store calls. */
#include "store_py.h"

#include <stddef.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    unsigned long long replica_num;
    unsigned long long nof_replica_num;
    unsigned long long dfs_replica_num;
    int soft_pin_action;
    bool with_soft_pin;
    bool soft_pin_ttl_set;
    unsigned long long soft_pin_ttl_ms;
    bool with_hard_pin;
    bool prefer_alloc_in_same_node;
    PyObject *preferred_segments;     /* tuple of str */
    PyObject *preferred_segment;      /* str */
    PyObject *preferred_nof_segments; /* tuple of str */
    int data_type;
    PyObject *group_ids; /* tuple of str, or NULL for None */
} rc_object;

static PyObject *rc_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    rc_object *self = (rc_object *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->replica_num = 1;
    self->preferred_segments = PyTuple_New(0);
    self->preferred_nof_segments = PyTuple_New(0);
    self->preferred_segment = PyUnicode_FromString("");
    if (!self->preferred_segments || !self->preferred_nof_segments ||
        !self->preferred_segment) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int rc_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "ReplicateConfig() takes no positional arguments (set attributes, "
                        "or pass them as keywords)");
        return -1;
    }
    if (kwds) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwds, &pos, &k, &v)) {
            if (!PyObject_HasAttr(self, k) || (PyUnicode_Check(k) &&
                                               PyUnicode_READ_CHAR(k, 0) == '_')) {
                PyErr_Format(PyExc_TypeError,
                             "'%U' is an invalid keyword argument for ReplicateConfig()", k);
                return -1;
            }
            if (PyObject_SetAttr(self, k, v) < 0)
                return -1;
        }
    }
    return 0;
}

static void rc_dealloc(PyObject *o)
{
    rc_object *self = (rc_object *)o;
    PyTypeObject *tp = Py_TYPE(o);
    Py_XDECREF(self->preferred_segments);
    Py_XDECREF(self->preferred_segment);
    Py_XDECREF(self->preferred_nof_segments);
    Py_XDECREF(self->group_ids);
    tp->tp_free(o);
    Py_DECREF(tp); /* instances of a heap type hold a reference to it */
}

#define RC_NO_DELETE(v, name)                                                          \
    do {                                                                               \
        if (!(v)) {                                                                    \
            PyErr_SetString(PyExc_TypeError, "cannot delete ReplicateConfig." name);   \
            return -1;                                                                 \
        }                                                                              \
    } while (0)

static int set_u64_attr(PyObject *v, const char *name, unsigned long long *dst)
{
    uint64_t x;
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    if (PyBool_Check(v) || mcpy_u64(v, "ReplicateConfig", name, &x) < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be an int, not bool",
                         name);
        return -1;
    }
    *dst = x;
    return 0;
}

static int set_bool_attr(PyObject *v, const char *name, bool *dst)
{
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return -1;
    *dst = t != 0;
    return 0;
}

/* A tuple of str from a list/tuple of str or bytes (bytes decoded as UTF-8). */
static PyObject *str_tuple(PyObject *v, const char *name)
{
    PyObject *t = mcpy_seq_tuple(v, "ReplicateConfig", name);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    PyObject *out = PyTuple_New(n);
    if (!out) {
        Py_DECREF(t);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(t, i), *s = NULL;
        if (PyUnicode_Check(x))
            s = Py_NewRef(x);
        else if (PyBytes_Check(x))
            s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x), "strict");
        else
            PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be a list of str, item "
                         "%zd is %.100s", name, i, Py_TYPE(x)->tp_name);
        if (!s) {
            Py_DECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, s);
    }
    Py_DECREF(t);
    return out;
}

/* The plain attributes are table-driven: their getset row's closure names the field and
 * where it lies in rc_object; one getter/setter pair per kind (u64, bool, str list). */
typedef struct rc_field {
    const char *name;
    size_t off;
} rc_field;

#define RC_FIELD(f) ((void *)&(const rc_field){#f, offsetof(rc_object, f)})

static void *rc_at(PyObject *o, void *c)
{
    return (char *)o + ((const rc_field *)c)->off;
}

static const char *rc_name(void *c)
{
    return ((const rc_field *)c)->name;
}

static PyObject *rc_get_u64(PyObject *o, void *c)
{
    return PyLong_FromUnsignedLongLong(*(unsigned long long *)rc_at(o, c));
}

static int rc_set_u64(PyObject *o, PyObject *v, void *c)
{
    return set_u64_attr(v, rc_name(c), rc_at(o, c));
}

static PyObject *rc_get_bool(PyObject *o, void *c)
{
    return PyBool_FromLong(*(bool *)rc_at(o, c));
}

static int rc_set_bool(PyObject *o, PyObject *v, void *c)
{
    return set_bool_attr(v, rc_name(c), rc_at(o, c));
}

static PyObject *rc_get_list(PyObject *o, void *c)
{
    return PySequence_List(*(PyObject **)rc_at(o, c));
}

static int rc_set_list(PyObject *o, PyObject *v, void *c)
{
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", rc_name(c));
        return -1;
    }
    PyObject *t = str_tuple(v, rc_name(c));
    if (!t)
        return -1;
    Py_SETREF(*(PyObject **)rc_at(o, c), t);
    return 0;
}

static PyObject *rc_get_preferred_segment(PyObject *o, void *c)
{
    (void)c;
    return Py_NewRef(((rc_object *)o)->preferred_segment);
}

static int rc_set_preferred_segment(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    RC_NO_DELETE(v, "preferred_segment");
    PyObject *s;
    if (PyUnicode_Check(v))
        s = Py_NewRef(v);
    else if (PyBytes_Check(v))
        s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), "strict");
    else {
        PyErr_Format(PyExc_TypeError, "ReplicateConfig.preferred_segment must be str, not "
                     "%.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    if (!s)
        return -1;
    Py_SETREF(((rc_object *)o)->preferred_segment, s);
    return 0;
}

static int set_enum_attr(PyObject *v, const char *name, int maxv, int *dst)
{
    long long x;
    if (!v) {
        PyErr_Format(PyExc_TypeError, "cannot delete ReplicateConfig.%s", name);
        return -1;
    }
    if (PyBool_Check(v) || PyFloat_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be a %s member, not %.100s",
                     name, name[0] == 's' ? "SoftPinAction" : "ObjectDataType",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (mcpy_int(v, "ReplicateConfig", name, 0, maxv, &x) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "ReplicateConfig.%s must be in 0..%d", name, maxv);
        return -1;
    }
    *dst = (int)x;
    return 0;
}

/* The enum getters return members of this module's IntEnum classes (module state). */
static PyObject *rc_get_soft_pin_action(PyObject *o, void *c)
{
    (void)c;
    mcpy_state *st = mcpy_state_of(o);
    return st ? mcpy_enum_member(st->soft_pin_cls, ((rc_object *)o)->soft_pin_action) : NULL;
}

static int rc_set_soft_pin_action(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    return set_enum_attr(v, "soft_pin_action", 2, &((rc_object *)o)->soft_pin_action);
}

static PyObject *rc_get_data_type(PyObject *o, void *c)
{
    (void)c;
    mcpy_state *st = mcpy_state_of(o);
    return st ? mcpy_enum_member(st->data_type_cls, ((rc_object *)o)->data_type) : NULL;
}

static int rc_set_data_type(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    return set_enum_attr(v, "data_type", 9, &((rc_object *)o)->data_type);
}

static PyObject *rc_get_soft_pin_ttl_ms(PyObject *o, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    if (!self->soft_pin_ttl_set)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(self->soft_pin_ttl_ms);
}

static int rc_set_soft_pin_ttl_ms(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    RC_NO_DELETE(v, "soft_pin_ttl_ms");
    if (v == Py_None) {
        self->soft_pin_ttl_set = false;
        self->soft_pin_ttl_ms = 0;
        return 0;
    }
    unsigned long long x;
    if (set_u64_attr(v, "soft_pin_ttl_ms", &x) < 0)
        return -1;
    self->soft_pin_ttl_set = true;
    self->soft_pin_ttl_ms = x;
    return 0;
}

static PyObject *rc_get_group_ids(PyObject *o, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    if (!self->group_ids)
        Py_RETURN_NONE;
    return PySequence_List(self->group_ids);
}

static int rc_set_group_ids(PyObject *o, PyObject *v, void *c)
{
    (void)c;
    rc_object *self = (rc_object *)o;
    RC_NO_DELETE(v, "group_ids");
    if (v == Py_None) {
        Py_CLEAR(self->group_ids);
        return 0;
    }
    PyObject *t = str_tuple(v, "group_ids");
    if (!t)
        return -1;
    Py_XSETREF(self->group_ids, t);
    return 0;
}

#define RC_GS(name, doc) {#name, rc_get_##name, rc_set_##name, doc, NULL}
#define RC_GS_AS(name, kind, doc) {#name, rc_get_##kind, rc_set_##kind, doc, RC_FIELD(name)}
static PyGetSetDef rc_getset[] = {
    RC_GS_AS(replica_num, u64, "int, 1: memory replicas wanted, each on a different segment "
                               "(best effort: fewer is success). 0 is refused by puts (-600)."),
    RC_GS_AS(nof_replica_num, u64, "int, 0: NVMe-oF replicas (not supported: puts with a non-zero "
                                   "value return -600)."),
    RC_GS_AS(dfs_replica_num, u64, "int, 0: DFS replicas (not supported: non-zero gives -600)."),
    RC_GS(soft_pin_action, "SoftPinAction, PRESERVE: ENABLE pins the object for "
                           "soft_pin_ttl_ms; DISABLE unpins on upsert (upstream HEAD)."),
    RC_GS(soft_pin_ttl_ms, "int ms or None (master default): only with ENABLE, else the "
                           "put returns -600; 0 = ordinary cache object."),
    RC_GS_AS(with_soft_pin, bool, "bool, False: v0.3.12 spelling of soft_pin_action=ENABLE."),
    RC_GS_AS(with_hard_pin, bool, "bool, False: never evicted (removable with force)."),
    RC_GS_AS(preferred_segments, list, "list[str], []: segment names ('host:port') tried first, in "
                                       "order (the getter returns a copy)."),
    RC_GS(preferred_segment, "str, '': deprecated single preferred segment."),
    RC_GS_AS(preferred_nof_segments, list, "list[str], []: NVMe-oF segments (unused)."),
    RC_GS_AS(prefer_alloc_in_same_node, bool,
             "bool, False: local first; only the multi-buffer (and tensor) puts accept it, "
             "other puts return -600."),
    RC_GS(data_type, "ObjectDataType, UNKNOWN: tag only."),
    RC_GS(group_ids, "list[str] or None: one group per key of a batch call (length must "
                     "match the keys, else -600); accepted, not used for placement."),
    {NULL, NULL, NULL, NULL, NULL},
};

static const char *const rc_attr_names[] = {
    "replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_action",
    "soft_pin_ttl_ms", "with_soft_pin", "with_hard_pin", "preferred_segments",
    "preferred_segment", "preferred_nof_segments", "prefer_alloc_in_same_node",
    "data_type", "group_ids", NULL,
};

static PyObject *rc_repr(PyObject *o)
{
    rc_object *self = (rc_object *)o;
    PyObject *segs = PySequence_List(self->preferred_segments);
    PyObject *groups = self->group_ids ? PySequence_List(self->group_ids) : Py_NewRef(Py_None);
    PyObject *ttl = self->soft_pin_ttl_set
                        ? PyUnicode_FromFormat("%llu", self->soft_pin_ttl_ms)
                        : PyUnicode_FromString("default");
    PyObject *r = NULL;
    if (segs && groups && ttl)
        r = PyUnicode_FromFormat(
            "ReplicateConfig: { replica_num: %llu, nof_replica_num: %llu, dfs_replica_num: "
            "%llu, soft_pin_action: %s, soft_pin_ttl_ms: %U, with_soft_pin: %s, "
            "with_hard_pin: %s, preferred_segments: %R, preferred_segment: %R, "
            "prefer_alloc_in_same_node: %s, data_type: %s, group_ids: %R }",
            self->replica_num, self->nof_replica_num, self->dfs_replica_num,
            mcpy_soft_pin_name(self->soft_pin_action), ttl,
            self->with_soft_pin ? "true" : "false", self->with_hard_pin ? "true" : "false",
            segs, self->preferred_segment, self->prefer_alloc_in_same_node ? "true" : "false",
            mcpy_data_type_name(self->data_type), groups);
    Py_XDECREF(segs);
    Py_XDECREF(groups);
    Py_XDECREF(ttl);
    return r;
}

/* __reduce__: (ReplicateConfig, (), {attr: value}) so copy/pickle keep every field. */
static PyObject *rc_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *state = PyDict_New();
    if (!state)
        return NULL;
    for (int i = 0; rc_attr_names[i]; i++) {
        PyObject *v = PyObject_GetAttrString(self, rc_attr_names[i]);
        if (!v || PyDict_SetItemString(state, rc_attr_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(state);
            return NULL;
        }
        Py_DECREF(v);
    }
    return Py_BuildValue("(O()N)", (PyObject *)Py_TYPE(self), state);
}

static PyObject *rc_setstate(PyObject *self, PyObject *state)
{
    if (!PyDict_Check(state)) {
        PyErr_SetString(PyExc_TypeError, "ReplicateConfig state must be a dict");
        return NULL;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(state, &pos, &k, &v))
        if (PyObject_SetAttr(self, k, v) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef rc_methods[] = {
    {"__reduce__", rc_reduce, METH_NOARGS, NULL},
    {"__setstate__", rc_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot rc_slots[] = {
    {Py_tp_doc, "ReplicateConfig(): per-put placement options (upstream replica.h). Set the "
                "attributes after construction (keywords are accepted as a shortcut); "
                "pass it as the `config` argument of put*/upsert*/pub_tensor*."},
    {Py_tp_new, rc_new},
    {Py_tp_init, rc_init},
    {Py_tp_dealloc, rc_dealloc},
    {Py_tp_getset, rc_getset},
    {Py_tp_methods, rc_methods},
    {Py_tp_repr, rc_repr},
    {0, NULL},
};

PyType_Spec mcpy_rc_spec = {
    .name = "mooncake.store.ReplicateConfig",
    .basicsize = sizeof(rc_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = rc_slots,
};

/* The C config borrows the Python strings: the holder keeps the tuples alive (a caller
 * may reassign the attributes while the GIL is released). */
int mcpy_rc_from(mcpy_state *st, PyObject *cfg, const char *fn, mcpy_rc *out)
{
    memset(out, 0, sizeof(*out));
    mc_store_replicate_config_init(&out->c);
    if (!cfg || cfg == Py_None)
        return 0;
    if (!PyObject_TypeCheck(cfg, st->rc_type)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'config' must be ReplicateConfig, not "
                     "%.100s", fn, Py_TYPE(cfg)->tp_name);
        return -1;
    }
    rc_object *r = (rc_object *)cfg;
    /* the C config counts replicas in 32 bits; larger asks are clamped (still refused
     * by the master as more replicas than segments) */
#define CLAMP32(x) ((x) > UINT32_MAX ? UINT32_MAX : (uint32_t)(x))
    out->c.replica_num = CLAMP32(r->replica_num);
    out->c.nof_replica_num = CLAMP32(r->nof_replica_num);
    out->c.dfs_replica_num = CLAMP32(r->dfs_replica_num);
#undef CLAMP32
    out->c.soft_pin_action = r->soft_pin_action;
    out->c.with_soft_pin = r->with_soft_pin;
    out->c.soft_pin_ttl_set = r->soft_pin_ttl_set;
    out->c.soft_pin_ttl_ms = r->soft_pin_ttl_ms;
    out->c.with_hard_pin = r->with_hard_pin;
    out->c.prefer_alloc_in_same_node = r->prefer_alloc_in_same_node;
    out->c.data_type = r->data_type;
    out->segs = Py_NewRef(r->preferred_segments);
    out->seg = Py_NewRef(r->preferred_segment);
    out->groups = r->group_ids ? Py_NewRef(r->group_ids) : NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(out->segs);
    out->seg_ptrs = PyMem_Calloc((size_t)ns + 1, sizeof(char *));
    if (!out->seg_ptrs)
        goto nomem;
    for (Py_ssize_t i = 0; i < ns; i++)
        if (mcpy_cstr(PyTuple_GET_ITEM(out->segs, i), fn, "config.preferred_segments",
                      &out->seg_ptrs[i]) < 0)
            goto fail;
    out->c.preferred_segments = out->seg_ptrs;
    out->c.n_preferred_segments = (size_t)ns;
    if (mcpy_cstr(out->seg, fn, "config.preferred_segment", &out->c.preferred_segment) < 0)
        goto fail;
    if (out->groups) {
        Py_ssize_t ng = PyTuple_GET_SIZE(out->groups);
        out->group_ptrs = PyMem_Calloc((size_t)ng + 1, sizeof(char *));
        if (!out->group_ptrs)
            goto nomem;
        for (Py_ssize_t i = 0; i < ng; i++)
            if (mcpy_cstr(PyTuple_GET_ITEM(out->groups, i), fn, "config.group_ids",
                          &out->group_ptrs[i]) < 0)
                goto fail;
        out->c.group_ids = out->group_ptrs;
        out->c.n_group_ids = (size_t)ng;
    }
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    mcpy_rc_clear(out);
    return -1;
}

void mcpy_rc_clear(mcpy_rc *rc)
{
    Py_CLEAR(rc->segs);
    Py_CLEAR(rc->groups);
    Py_CLEAR(rc->seg);
    PyMem_Free(rc->seg_ptrs);
    PyMem_Free(rc->group_ptrs);
    rc->seg_ptrs = NULL;
    rc->group_ptrs = NULL;
}
