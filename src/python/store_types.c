/* store_types.c: the helper types of `mooncake.store`: the IntEnums ReplicaStatus /
 * SoftPinAction / ObjectDataType, BufferHandle, the replica descriptor classes and
 * MooncakeHostMemAllocator; mcpy_types_init creates them (and ReplicateConfig, whose code
 * is store_config.c) into the module state. No store calls except buffer frees.
 *
 * Upstream: `mooncake-integration/store/store_py.cpp` (PYBIND11_MODULE(store)) binds
 * ReplicateConfig (replica.h), the enums, BufferHandle (client_buffer.h), the replica
 * descriptor classes, and MooncakeHostMemAllocator (shm_helper.h); behaviour summarised
 * in ../shared/reference/upstream-mooncake.md §1.1, §1.2, §1.5, §1.7. */
#include "store_py.h"

#include <structmember.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

#define TAG MCPY_TAG

/* ================================================================================== */
/* Enums                                                                               */
/* ================================================================================== */

typedef struct {
    const char *name;
    int value;
} enum_row;

static const enum_row replica_status_rows[] = {
    {"UNDEFINED", 0}, {"INITIALIZED", 1}, {"PROCESSING", 2},
    {"COMPLETE", 3},  {"REMOVED", 4},     {"FAILED", 5},
};
static const enum_row soft_pin_rows[] = {{"PRESERVE", 0}, {"ENABLE", 1}, {"DISABLE", 2}};
static const enum_row data_type_rows[] = {
    {"UNKNOWN", 0},  {"KVCACHE", 1},    {"TENSOR", 2},          {"WEIGHT", 3},
    {"SAMPLE", 4},   {"ACTIVATION", 5}, {"GRADIENT", 6},        {"OPTIMIZER_STATE", 7},
    {"METADATA", 8}, {"GENERAL", 9},
};

const char *mcpy_soft_pin_name(int value)
{
    for (size_t i = 0; i < sizeof soft_pin_rows / sizeof soft_pin_rows[0]; i++)
        if (soft_pin_rows[i].value == value)
            return soft_pin_rows[i].name;
    return "?";
}

const char *mcpy_data_type_name(int value)
{
    for (size_t i = 0; i < sizeof data_type_rows / sizeof data_type_rows[0]; i++)
        if (data_type_rows[i].value == value)
            return data_type_rows[i].name;
    return "?";
}

/* An enum.IntEnum named `name` with `rows`, added to module (and its members too when
 * export_values, as pybind11's .export_values()). Returns a new reference (kept in the
 * module state by the caller) or NULL. */
static PyObject *make_enum(PyObject *module, const char *name, const char *doc,
                           const enum_row *rows, size_t n, bool export_values)
{
    PyObject *members = PyList_New((Py_ssize_t)n), *cls = NULL;
    if (!members)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(si)", rows[i].name, rows[i].value);
        if (!pair)
            goto fail;
        PyList_SET_ITEM(members, (Py_ssize_t)i, pair);
    }
    cls = mc__py_int_enum(module, name, members, doc);
    if (!cls || PyModule_AddObjectRef(module, name, cls) < 0)
        goto fail;
    if (export_values) {
        for (size_t i = 0; i < n; i++) {
            PyObject *m = PyObject_GetAttrString(cls, rows[i].name);
            if (!m || PyModule_AddObject(module, rows[i].name, m) < 0) {
                Py_XDECREF(m);
                goto fail;
            }
        }
    }
    Py_DECREF(members);
    return cls;
fail:
    Py_DECREF(members);
    Py_XDECREF(cls);
    return NULL;
}

PyObject *mcpy_enum_member(PyObject *cls, int value)
{
    PyObject *r = PyObject_CallFunction(cls, "i", value);
    if (!r) { /* an unknown value: the plain int */
        PyErr_Clear();
        r = PyLong_FromLong(value);
    }
    return r;
}

/* ================================================================================== */
/* BufferHandle                                                                       */
/* ================================================================================== */

typedef struct {
    PyObject_HEAD
    mc_store_buffer *buf; /* owned; freed in dealloc */
} bh_object;

static char bh_empty[1];

PyObject *mcpy_buffer_handle_new(mcpy_state *st, mc_store_buffer *b)
{
    bh_object *self = PyObject_New(bh_object, st->bh_type);
    if (!self) {
        mc_store_buffer_free(b);
        return NULL;
    }
    self->buf = b;
    return (PyObject *)self;
}

static void bh_dealloc(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    PyTypeObject *tp = Py_TYPE(o);
    mc_store_buffer *b = self->buf;
    self->buf = NULL;
    if (b) {
        /* the buffer may be the last reference to a closed store's memory: freeing it
         * can unmap, so no GIL */
        Py_BEGIN_ALLOW_THREADS
        mc_store_buffer_free(b);
        Py_END_ALLOW_THREADS
    }
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyObject *bh_ptr(PyObject *o, PyObject *unused)
{
    (void)unused;
    bh_object *self = (bh_object *)o;
    return PyLong_FromVoidPtr(self->buf ? mc_store_buffer_data(self->buf) : NULL);
}

static PyObject *bh_size(PyObject *o, PyObject *unused)
{
    (void)unused;
    bh_object *self = (bh_object *)o;
    return PyLong_FromUnsignedLongLong(self->buf ? mc_store_buffer_size(self->buf) : 0);
}

static Py_ssize_t bh_len(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    return self->buf ? (Py_ssize_t)mc_store_buffer_size(self->buf) : 0;
}

static int bh_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
    bh_object *self = (bh_object *)o;
    void *p = self->buf ? mc_store_buffer_data(self->buf) : NULL;
    Py_ssize_t n = self->buf ? (Py_ssize_t)mc_store_buffer_size(self->buf) : 0;
    /* an empty handle still exports a valid (1-byte static) pointer */
    if (PyBuffer_FillInfo(view, o, p ? p : bh_empty, n, 0, flags) < 0)
        return -1;
    if (flags & PyBUF_FORMAT)
        view->format = "b"; /* upstream exports char, itemsize 1 */
    return 0;
}

static PyObject *bh_repr(PyObject *o)
{
    bh_object *self = (bh_object *)o;
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%llu>",
                                self->buf ? mc_store_buffer_data(self->buf) : NULL,
                                (unsigned long long)(self->buf ? mc_store_buffer_size(self->buf)
                                                               : 0));
}

static PyMethodDef bh_methods[] = {
    {"ptr", bh_ptr, METH_NOARGS, "ptr() -> int: address of the bytes (0 when empty)."},
    {"size", bh_size, METH_NOARGS, "size() -> int: number of bytes."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot bh_slots[] = {
    {Py_tp_doc, "BufferHandle: an object's bytes in this client's memory (returned by "
                "get_buffer / batch_get_buffer; upstream client_buffer.h). Supports the "
                "buffer protocol (1-D, format 'b', writable): memoryview(h), bytes(h), "
                "numpy.frombuffer(h, ...). The memory is released when the handle and every "
                "view of it are gone, even after the store was closed."},
    {Py_tp_dealloc, bh_dealloc},
    {Py_tp_methods, bh_methods},
    {Py_bf_getbuffer, bh_getbuffer},
    {Py_sq_length, bh_len},
    {Py_tp_repr, bh_repr},
    {0, NULL},
};

static PyType_Spec bh_spec = {
    .name = "mooncake.store.BufferHandle",
    .basicsize = sizeof(bh_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = bh_slots,
};

/* ================================================================================== */
/* Replica descriptors                                                                */
/* ================================================================================== */

typedef struct {
    PyObject_HEAD
    unsigned long long size;
    unsigned long long buffer_address;
    PyObject *transport_endpoint;
} desc_object;

typedef struct {
    PyObject_HEAD
    PyObject *buffer_descriptor;
} memdesc_object;

typedef struct {
    PyObject_HEAD
    PyObject *file_path;
    unsigned long long object_size;
} diskdesc_object;

typedef struct {
    PyObject_HEAD
    PyObject *status;
    PyObject *memory; /* MemoryDescriptor or NULL */
    PyObject *disk;   /* DiskDescriptor or NULL */
    bool local_disk;
} replica_object;

/* Frees o and drops the reference its heap type holds. */
static void free_instance(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static void desc_dealloc(PyObject *o)
{
    Py_XDECREF(((desc_object *)o)->transport_endpoint);
    free_instance(o);
}

static void memdesc_dealloc(PyObject *o)
{
    Py_XDECREF(((memdesc_object *)o)->buffer_descriptor);
    free_instance(o);
}

static void diskdesc_dealloc(PyObject *o)
{
    Py_XDECREF(((diskdesc_object *)o)->file_path);
    free_instance(o);
}

static void replica_dealloc(PyObject *o)
{
    replica_object *r = (replica_object *)o;
    Py_XDECREF(r->status);
    Py_XDECREF(r->memory);
    Py_XDECREF(r->disk);
    free_instance(o);
}

static PyObject *desc_repr(PyObject *o)
{
    desc_object *d = (desc_object *)o;
    return PyUnicode_FromFormat("<Descriptor size=%llu buffer_address=%llu "
                                "transport_endpoint=%S>",
                                d->size, d->buffer_address, d->transport_endpoint);
}

static PyMemberDef desc_members[] = {
    {"size", T_ULONGLONG, offsetof(desc_object, size), 0, "bytes"},
    {"buffer_address", T_ULONGLONG, offsetof(desc_object, buffer_address), 0,
     "address of the replica in its owner's process"},
    {"transport_endpoint", T_OBJECT_EX, offsetof(desc_object, transport_endpoint), 0,
     "owner's segment name 'host:port'"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef memdesc_members[] = {
    {"buffer_descriptor", T_OBJECT_EX, offsetof(memdesc_object, buffer_descriptor), READONLY,
     "Descriptor of the replica's memory"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef diskdesc_members[] = {
    {"file_path", T_OBJECT_EX, offsetof(diskdesc_object, file_path), 0, "str"},
    {"object_size", T_ULONGLONG, offsetof(diskdesc_object, object_size), 0, "bytes"},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef replica_members[] = {
    {"status", T_OBJECT_EX, offsetof(replica_object, status), READONLY, "ReplicaStatus"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *replica_is_memory(PyObject *o, PyObject *u)
{
    (void)u;
    return PyBool_FromLong(((replica_object *)o)->memory != NULL);
}

static PyObject *replica_is_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    return PyBool_FromLong(r->disk != NULL && !r->local_disk);
}

static PyObject *replica_is_local_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    return PyBool_FromLong(r->disk != NULL && r->local_disk);
}

static PyObject *replica_get_memory(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    if (!r->memory) {
        PyErr_SetString(PyExc_RuntimeError, "not a memory replica");
        return NULL;
    }
    return Py_NewRef(r->memory);
}

static PyObject *replica_get_disk(PyObject *o, PyObject *u)
{
    (void)u;
    replica_object *r = (replica_object *)o;
    if (!r->disk) {
        PyErr_SetString(PyExc_RuntimeError, "not a disk replica");
        return NULL;
    }
    return Py_NewRef(r->disk);
}

static PyObject *replica_repr(PyObject *o)
{
    replica_object *r = (replica_object *)o;
    PyObject *name = PyObject_GetAttrString(r->status, "name"), *res;
    if (!name) {
        PyErr_Clear();
        name = PyObject_Str(r->status);
        if (!name)
            return NULL;
    }
    if (r->memory)
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U memory=%R>", name,
                                   ((memdesc_object *)r->memory)->buffer_descriptor);
    else if (r->disk && r->local_disk)
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U local_disk=%R>", name,
                                   ((diskdesc_object *)r->disk)->file_path);
    else if (r->disk)
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U disk=%R>", name,
                                   ((diskdesc_object *)r->disk)->file_path);
    else
        res = PyUnicode_FromFormat("<ReplicaDescriptor status=%U>", name);
    Py_DECREF(name);
    return res;
}

static PyMethodDef replica_methods[] = {
    {"is_memory_replica", replica_is_memory, METH_NOARGS, "True for an in-memory replica."},
    {"is_disk_replica", replica_is_disk, METH_NOARGS,
     "True for a shared-FS DISK replica (master --root_fs_dir): get_disk_descriptor()."
     "file_path is its file in the shared directory."},
    {"is_local_disk_replica", replica_is_local_disk, METH_NOARGS,
     "True for a LOCAL_DISK replica (on the disk tier of the client named by "
     "get_disk_descriptor().file_path)."},
    {"get_memory_descriptor", replica_get_memory, METH_NOARGS,
     "MemoryDescriptor; RuntimeError for other replicas."},
    {"get_disk_descriptor", replica_get_disk, METH_NOARGS,
     "DiskDescriptor; RuntimeError for other replicas."},
    {NULL, NULL, 0, NULL},
};

#define NO_NEW_FLAGS                                                                   \
    (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION)

static PyType_Slot desc_slots[] = {
    {Py_tp_doc, "Where a memory replica lives (upstream AllocatedBuffer::Descriptor)."},
    {Py_tp_dealloc, desc_dealloc},
    {Py_tp_members, desc_members},
    {Py_tp_repr, desc_repr},
    {0, NULL},
};
static PyType_Spec desc_spec = {"mooncake.store.Descriptor", sizeof(desc_object), 0,
                                NO_NEW_FLAGS, desc_slots};

static PyType_Slot memdesc_slots[] = {
    {Py_tp_doc, "Memory replica descriptor: buffer_descriptor."},
    {Py_tp_dealloc, memdesc_dealloc},
    {Py_tp_members, memdesc_members},
    {0, NULL},
};
static PyType_Spec memdesc_spec = {"mooncake.store.MemoryDescriptor", sizeof(memdesc_object),
                                   0, NO_NEW_FLAGS, memdesc_slots};

static PyType_Slot diskdesc_slots[] = {
    {Py_tp_doc, "Disk replica descriptor: file_path (DISK: the file in the shared "
                "directory; LOCAL_DISK: the owner's disk-read endpoint), object_size."},
    {Py_tp_dealloc, diskdesc_dealloc},
    {Py_tp_members, diskdesc_members},
    {0, NULL},
};
static PyType_Spec diskdesc_spec = {"mooncake.store.DiskDescriptor", sizeof(diskdesc_object),
                                    0, NO_NEW_FLAGS, diskdesc_slots};

static PyType_Slot replica_slots[] = {
    {Py_tp_doc, "One replica of an object (get_replica_desc / batch_get_replica_desc)."},
    {Py_tp_dealloc, replica_dealloc},
    {Py_tp_members, replica_members},
    {Py_tp_methods, replica_methods},
    {Py_tp_repr, replica_repr},
    {0, NULL},
};
static PyType_Spec replica_spec = {"mooncake.store.ReplicaDescriptor", sizeof(replica_object),
                                   0, NO_NEW_FLAGS, replica_slots};

/* A LOCAL_DISK replica (docs/ssd-tier.md): ReplicaDescriptor whose disk descriptor's
 * file_path is the owning client's segment name (where its disk tier is read through)
 * and object_size the object's bytes; is_local_disk_replica() is True. */
static PyObject *local_disk_to_py(mcpy_state *st, const mc_store_replica_desc *d,
                                  bool local)
{
    diskdesc_object *dd = PyObject_New(diskdesc_object, st->diskdesc_type);
    if (!dd)
        return NULL;
    dd->object_size = d->size;
    dd->file_path = PyUnicode_DecodeUTF8(
        d->transport_endpoint, (Py_ssize_t)strnlen(d->transport_endpoint, MC_STORE_NAME_MAX),
        "replace");
    if (!dd->file_path) {
        Py_DECREF(dd);
        return NULL;
    }
    replica_object *r = PyObject_New(replica_object, st->replica_type);
    if (!r) {
        Py_DECREF(dd);
        return NULL;
    }
    r->memory = NULL;
    r->disk = (PyObject *)dd;
    r->local_disk = local;
    r->status = mcpy_enum_member(st->replica_status_cls, d->status);
    if (!r->status) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

/* ReplicaDescriptor(memory=MemoryDescriptor(Descriptor(...))) for one C descriptor (a
 * memory replica), or the LOCAL_DISK form above. */
static PyObject *replica_to_py(mcpy_state *st, const mc_store_replica_desc *d)
{
    if (d->replica_type == 2 || d->replica_type == 1) /* LOCAL_DISK / DISK (shared FS) */
        return local_disk_to_py(st, d, d->replica_type == 2);
    desc_object *desc = PyObject_New(desc_object, st->desc_type);
    if (!desc)
        return NULL;
    desc->size = d->size;
    desc->buffer_address = d->buffer_address;
    desc->transport_endpoint = PyUnicode_DecodeUTF8(
        d->transport_endpoint, (Py_ssize_t)strnlen(d->transport_endpoint, MC_STORE_NAME_MAX),
        "replace");
    if (!desc->transport_endpoint) {
        Py_DECREF(desc);
        return NULL;
    }
    memdesc_object *mem = PyObject_New(memdesc_object, st->memdesc_type);
    if (!mem) {
        Py_DECREF(desc);
        return NULL;
    }
    mem->buffer_descriptor = (PyObject *)desc;
    replica_object *r = PyObject_New(replica_object, st->replica_type);
    if (!r) {
        Py_DECREF(mem);
        return NULL;
    }
    r->memory = (PyObject *)mem;
    r->disk = NULL;
    r->local_disk = false;
    r->status = mcpy_enum_member(st->replica_status_cls, d->status);
    if (!r->status) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

PyObject *mcpy_replica_list_to_py(mcpy_state *st, const mc_store_replica_list *l)
{
    uint32_t n = l->n > MC_STORE_MAX_REPLICAS ? MC_STORE_MAX_REPLICAS : l->n;
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        PyObject *r = replica_to_py(st, &l->replicas[i]);
        if (!r) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, r);
    }
    return list;
}

/* ================================================================================== */
/* MooncakeHostMemAllocator                                                           */
/* ================================================================================== */

/* Every live allocation, process-wide (allocations outlive the allocator objects, as
 * upstream's singleton ShmHelper). Guarded by host_mu. */
typedef struct {
    void *addr;
    size_t size;
    int fd;
} host_alloc;
static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static host_alloc *host_allocs;
static size_t host_n, host_cap;

#define HOST_ALLOC_MAX (1ull << 40)

typedef struct {
    PyObject_HEAD
} hostmem_object;

static PyObject *hostmem_alloc(PyObject *self, PyObject *arg)
{
    (void)self;
    uint64_t size;
    if (mcpy_u64(arg, "alloc", "size", &size) < 0)
        return NULL;
    if (size == 0 || size > HOST_ALLOC_MAX)
        return PyLong_FromLong(0);
    void *p = MAP_FAILED;
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = memfd_create("mooncake_shm", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED && fd >= 0) {
        close(fd);
        fd = -1;
    }
    if (p != MAP_FAILED) {
        pthread_mutex_lock(&host_mu);
        if (host_n == host_cap) {
            size_t nc = host_cap ? host_cap * 2 : 16;
            host_alloc *na = realloc(host_allocs, nc * sizeof(*na)); /* no GIL: not PyMem */
            if (na) {
                host_allocs = na;
                host_cap = nc;
            }
        }
        if (host_n < host_cap) {
            host_allocs[host_n++] = (host_alloc){p, (size_t)size, fd};
        } else {
            munmap(p, size);
            close(fd);
            p = MAP_FAILED;
        }
        pthread_mutex_unlock(&host_mu);
    }
    Py_END_ALLOW_THREADS
    if (p == MAP_FAILED) {
        mc_log(MC_LOG_WARN, TAG, "MooncakeHostMemAllocator.alloc(%llu) failed: %s",
               (unsigned long long)size, strerror(errno));
        return PyLong_FromLong(0);
    }
    return PyLong_FromVoidPtr(p);
}

static PyObject *hostmem_free(PyObject *self, PyObject *arg)
{
    (void)self;
    uint64_t addr;
    if (mcpy_u64(arg, "free", "ptr", &addr) < 0)
        return NULL;
    host_alloc found = {NULL, 0, -1};
    pthread_mutex_lock(&host_mu);
    for (size_t i = 0; i < host_n; i++) {
        if ((uintptr_t)host_allocs[i].addr == addr) {
            found = host_allocs[i];
            host_allocs[i] = host_allocs[--host_n];
            break;
        }
    }
    pthread_mutex_unlock(&host_mu);
    if (!found.addr)
        return PyLong_FromLong(MC_INVALID_PARAMS);
    Py_BEGIN_ALLOW_THREADS
    munmap(found.addr, found.size);
    close(found.fd);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(0);
}

static PyMethodDef hostmem_methods[] = {
    {"alloc", hostmem_alloc, METH_O,
     "alloc(size: int) -> int: address of `size` bytes of shared (memfd) host memory, "
     "zero-filled; 0 on failure (size 0 or above 1 TiB, out of memory). Lives until "
     "free(), independent of this object."},
    {"free", hostmem_free, METH_O,
     "free(ptr: int) -> int: releases memory from alloc(); 0, or -600 when ptr did not "
     "come from alloc()."},
    {NULL, NULL, 0, NULL},
};

static void hostmem_dealloc(PyObject *o)
{
    free_instance(o);
}

static PyType_Slot hostmem_slots[] = {
    {Py_tp_doc, "MooncakeHostMemAllocator(): shared host memory for clients that hand "
                "buffers to the store by address (upstream shm_helper.h)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, hostmem_dealloc},
    {Py_tp_methods, hostmem_methods},
    {0, NULL},
};

static PyType_Spec hostmem_spec = {
    .name = "mooncake.store.MooncakeHostMemAllocator",
    .basicsize = sizeof(hostmem_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = hostmem_slots,
};

/* ================================================================================== */
/* Module init                                                                         */
/* ================================================================================== */

int mcpy_types_init(PyObject *module, mcpy_state *st)
{
    st->replica_status_cls = make_enum(module, "ReplicaStatus",
                                       "Replica states (upstream replica.h).",
                                       replica_status_rows, 6, true);
    if (!st->replica_status_cls)
        return -1;
    st->soft_pin_cls = make_enum(module, "SoftPinAction",
                                 "ReplicateConfig.soft_pin_action values (upstream HEAD).",
                                 soft_pin_rows, 3, false);
    if (!st->soft_pin_cls)
        return -1;
    st->data_type_cls = make_enum(module, "ObjectDataType",
                                  "ReplicateConfig.data_type tags (upstream types.h).",
                                  data_type_rows, 10, true);
    if (!st->data_type_cls)
        return -1;
    struct {
        PyTypeObject **slot;
        PyType_Spec *spec;
    } types[] = {
        {&st->rc_type, &mcpy_rc_spec},          {&st->bh_type, &bh_spec},
        {&st->desc_type, &desc_spec},           {&st->memdesc_type, &memdesc_spec},
        {&st->diskdesc_type, &diskdesc_spec},   {&st->replica_type, &replica_spec},
        {&st->hostmem_type, &hostmem_spec},
    };
    /* the state holds each type; PyModule_AddType adds a second reference for the module
     * attribute named after the part of the spec name after the last dot */
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        *types[i].slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, types[i].spec, NULL);
        if (!*types[i].slot || PyModule_AddType(module, *types[i].slot) < 0)
            return -1;
    }
    return 0;
}
