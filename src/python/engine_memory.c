/* engine_memory.c: TransferEngine's setup and local-memory methods: initialize,
 * initialize_ext, get_rpc_port, (batch_)(un)register_memory, allocate/free_managed_buffer,
 * write_bytes_to_buffer, read_bytes_from_buffer, and the table of local ranges this
 * object registered or allocated (every transfer's local side must lie inside it). */
#include "engine_py.h"

#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

/* ---- tracked local ranges (guarded by the GIL) ---- */

static int ranges_add(TEObject *self, uint64_t addr, uint64_t len, int kind)
{
    for (size_t i = 0; i < self->nranges; i++)
        if (self->ranges[i].addr == addr && self->ranges[i].len == len &&
            self->ranges[i].kind == kind)
            return 0; /* re-registration of the same buffer: no-op, as the engine */
    if (self->nranges == self->cap) {
        size_t ncap = self->cap ? self->cap * 2 : 16;
        py_range *r = PyMem_Realloc(self->ranges, ncap * sizeof(*r));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        self->ranges = r;
        self->cap = ncap;
    }
    self->ranges[self->nranges++] = (py_range){addr, len, kind};
    return 0;
}

/* Removes the first range of `kind` starting at addr (and of length len when len != 0). */
static void ranges_remove(TEObject *self, uint64_t addr, uint64_t len, int kind)
{
    for (size_t i = 0; i < self->nranges; i++) {
        py_range *r = &self->ranges[i];
        if (r->addr == addr && r->kind == kind && (len == 0 || r->len == len)) {
            self->ranges[i] = self->ranges[--self->nranges];
            return;
        }
    }
}

int mcpy_ranges_contain(const TEObject *self, uint64_t addr, uint64_t len)
{
    if (len == 0)
        return 1;
    if (addr + len < addr)
        return 0;
    for (size_t i = 0; i < self->nranges; i++) {
        const py_range *r = &self->ranges[i];
        if (addr >= r->addr && addr + len <= r->addr + r->len)
            return 1;
    }
    return 0;
}

/* ---- initialize ---- */

static PyObject *do_initialize(TEObject *self, const char *fn, const char *host,
                               const char *conn, const char *proto, const char *dev)
{
    if (self->te || self->initializing) {
        mc_log(MC_LOG_ERROR, PY_TAG, "%s: the engine is already initialized", fn);
        return ret_int(MC_INVALID_PARAMS);
    }
    /* the engine is created and started with the GIL released; `initializing` keeps a
     * second initialize() on another thread out meanwhile */
    mc_te *te = NULL;
    int rc = mc_te_create(NULL, &te);
    if (rc != MC_OK)
        return ret_int(rc);
    self->initializing = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_initialize(te, host, conn, proto, dev);
    if (rc != MC_OK) {
        mc_te_destroy(te);
        te = NULL;
    }
    Py_END_ALLOW_THREADS
    self->initializing = 0;
    if (rc == MC_OK)
        self->te = te;
    return ret_int(rc);
}

static PyObject *te_initialize(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname", "metadata_server", "protocol", "device_name",
                             NULL};
    PyObject *a, *b, *c, *d;
    const char *host, *conn, *proto, *dev;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:initialize", kwlist, &a, &b, &c, &d))
        return NULL;
    if (mcpy_arg_str("initialize", "local_hostname", a, 0, &host) < 0 ||
        mcpy_arg_str("initialize", "metadata_server", b, 0, &conn) < 0 ||
        mcpy_arg_str("initialize", "protocol", c, 1, &proto) < 0 ||
        mcpy_arg_str("initialize", "device_name", d, 1, &dev) < 0)
        return NULL;
    /* Upstream parseConnectionString: "proto://rest" as given, P2PHANDSHAKE, anything
     * else is etcd. mc_metadata_parse_conn applies the same rules. */
    return do_initialize(self, "initialize", host, conn, proto, dev);
}

static PyObject *te_initialize_ext(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname", "metadata_server", "protocol",
                             "device_name", "metadata_type", NULL};
    PyObject *a, *b, *c, *d, *e;
    const char *host, *server, *proto, *dev, *type;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO:initialize_ext", kwlist, &a, &b, &c,
                                     &d, &e))
        return NULL;
    if (mcpy_arg_str("initialize_ext", "local_hostname", a, 0, &host) < 0 ||
        mcpy_arg_str("initialize_ext", "metadata_server", b, 0, &server) < 0 ||
        mcpy_arg_str("initialize_ext", "protocol", c, 1, &proto) < 0 ||
        mcpy_arg_str("initialize_ext", "device_name", d, 1, &dev) < 0 ||
        mcpy_arg_str("initialize_ext", "metadata_type", e, 0, &type) < 0)
        return NULL;
    /* Upstream buildConnString: P2PHANDSHAKE and strings with "://" as they are,
     * otherwise metadata_type + "://" + metadata_server. */
    if (strcmp(server, MC_METADATA_P2PHANDSHAKE) == 0 || strstr(server, "://"))
        return do_initialize(self, "initialize_ext", host, server, proto, dev);
    PyObject *conn = PyUnicode_FromFormat("%s://%s", type, server);
    if (!conn)
        return NULL;
    const char *cs = PyUnicode_AsUTF8(conn);
    PyObject *r = cs ? do_initialize(self, "initialize_ext", host, cs, proto, dev) : NULL;
    Py_DECREF(conn);
    return r;
}

static PyObject *te_get_rpc_port(TEObject *self, PyObject *noargs)
{
    (void)noargs;
    mc_te *te = te_of(self);
    return ret_int(te ? mc_te_get_rpc_port(te) : -1);
}

/* ---- memory ---- */

static int is_metadata_error(int rc)
{
    /* The engine keeps (and serves) a registration whose republish failed. */
    return rc == MC_RPC_FAIL || rc == MC_RPC_TIMEOUT;
}

static PyObject *te_register_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", "capacity", "location", NULL};
    PyObject *a, *b, *c = NULL;
    uint64_t addr, len;
    const char *loc = "*";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:register_memory", kwlist, &a, &b, &c))
        return NULL;
    if (mcpy_arg_u64("register_memory", "buffer_addr", a, &addr) < 0 ||
        mcpy_arg_u64("register_memory", "capacity", b, &len) < 0 ||
        (c && mcpy_arg_str("register_memory", "location", c, 0, &loc) < 0))
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    if (len > SIZE_MAX || addr + len < addr)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_register_memory(te, (void *)(uintptr_t)addr, (size_t)len, loc);
    Py_END_ALLOW_THREADS
    /* tracked even when only the republish failed: the engine serves the range */
    if ((rc == MC_OK || is_metadata_error(rc)) &&
        ranges_add(self, addr, len, RANGE_REGISTERED) < 0)
        return NULL;
    return ret_int(rc);
}

static PyObject *te_unregister_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", NULL};
    PyObject *a;
    uint64_t addr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_memory", kwlist, &a))
        return NULL;
    if (mcpy_arg_u64("unregister_memory", "buffer_addr", a, &addr) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_unregister_memory(te, (void *)(uintptr_t)addr);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc))
        ranges_remove(self, addr, 0, RANGE_REGISTERED);
    return ret_int(rc);
}

static PyObject *te_batch_register_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addresses", "capacities", "location", NULL};
    PyObject *a, *b, *c = NULL, *res = NULL;
    uint64_t *addrs = NULL, *lens = NULL;
    size_t na = 0, nl = 0;
    const char *loc = "*";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:batch_register_memory", kwlist, &a, &b,
                                     &c))
        return NULL;
    if (mcpy_arg_u64_list("batch_register_memory", "buffer_addresses", a, &addrs, &na) < 0 ||
        mcpy_arg_u64_list("batch_register_memory", "capacities", b, &lens, &nl) < 0 ||
        (c && mcpy_arg_str("batch_register_memory", "location", c, 0, &loc) < 0))
        goto out;
    mc_te *te = te_of(self);
    if (!te || na != nl) {
        if (na != nl)
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "batch_register_memory: %zu addresses but %zu capacities", na, nl);
        res = ret_int(MC_INVALID_PARAMS);
        goto out;
    }
    for (size_t i = 0; i < na; i++) {
        if (lens[i] > SIZE_MAX || addrs[i] + lens[i] < addrs[i]) {
            res = ret_int(MC_INVALID_PARAMS);
            goto out;
        }
    }
    /* uint64_t and void * / size_t have the same size on the 64-bit targets we build
     * for (checked at compile time below), so the arrays are passed as they are. */
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_batch_register_memory(te, (void *const *)addrs, (const size_t *)lens, na, loc);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc)) {
        for (size_t i = 0; i < na; i++)
            if (ranges_add(self, addrs[i], lens[i], RANGE_REGISTERED) < 0)
                goto out;
    }
    res = ret_int(rc);
out:
    PyMem_Free(addrs);
    PyMem_Free(lens);
    return res;
}

static PyObject *te_batch_unregister_memory(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addresses", NULL};
    PyObject *a, *res = NULL;
    uint64_t *addrs = NULL;
    size_t na = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:batch_unregister_memory", kwlist, &a))
        return NULL;
    if (mcpy_arg_u64_list("batch_unregister_memory", "buffer_addresses", a, &addrs, &na) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te) {
        res = ret_int(MC_INVALID_PARAMS);
        goto out;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_batch_unregister_memory(te, (void *const *)addrs, na);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK || is_metadata_error(rc))
        for (size_t i = 0; i < na; i++)
            ranges_remove(self, addrs[i], 0, RANGE_REGISTERED);
    res = ret_int(rc);
out:
    PyMem_Free(addrs);
    return res;
}

static PyObject *te_allocate_managed_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", NULL};
    PyObject *a;
    uint64_t len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:allocate_managed_buffer", kwlist, &a))
        return NULL;
    if (mcpy_arg_u64("allocate_managed_buffer", "length", a, &len) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te || len == 0 || len > SIZE_MAX)
        return PyLong_FromLong(0);
    void *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_allocate_managed_buffer(te, (size_t)len, &p);
    Py_END_ALLOW_THREADS
    if (rc != MC_OK || !p)
        return PyLong_FromLong(0);
    if (ranges_add(self, (uint64_t)(uintptr_t)p, len, RANGE_MANAGED) < 0) {
        mc_te_free_managed_buffer(te, p, (size_t)len);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *te_free_managed_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer_addr", "length", NULL};
    PyObject *a, *b;
    uint64_t addr, len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:free_managed_buffer", kwlist, &a, &b))
        return NULL;
    if (mcpy_arg_u64("free_managed_buffer", "buffer_addr", a, &addr) < 0 ||
        mcpy_arg_u64("free_managed_buffer", "length", b, &len) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te || len > SIZE_MAX)
        return ret_int(MC_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_free_managed_buffer(te, (void *)(uintptr_t)addr, (size_t)len);
    Py_END_ALLOW_THREADS
    if (rc == MC_OK)
        ranges_remove(self, addr, len, RANGE_MANAGED);
    return ret_int(rc);
}

static PyObject *te_write_bytes_to_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dest_address", "src", "length", NULL};
    PyObject *a, *b, *c;
    uint64_t addr, len;
    Py_buffer view;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:write_bytes_to_buffer", kwlist, &a, &b,
                                     &c))
        return NULL;
    if (mcpy_arg_u64("write_bytes_to_buffer", "dest_address", a, &addr) < 0 ||
        mcpy_arg_u64("write_bytes_to_buffer", "length", c, &len) < 0)
        return NULL;
    if (PyUnicode_Check(b) || PyObject_GetBuffer(b, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "write_bytes_to_buffer(): argument 'src' must be bytes-like, not "
                     "%.100s",
                     Py_TYPE(b)->tp_name);
        return NULL;
    }
    if (len > (uint64_t)view.len) {
        PyErr_Format(PyExc_ValueError,
                     "write_bytes_to_buffer(): length %llu is larger than src (%zd bytes)",
                     (unsigned long long)len, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!mcpy_ranges_contain(self, addr, len)) {
        PyErr_Format(PyExc_ValueError,
                     "write_bytes_to_buffer(): [%p, +%llu) is not inside memory this "
                     "engine registered or allocated", /* PyErr_Format has no %llx */
                     (void *)(uintptr_t)addr, (unsigned long long)len);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (len)
        memcpy((void *)(uintptr_t)addr, view.buf, (size_t)len);
    PyBuffer_Release(&view);
    return ret_int(0);
}

static PyObject *te_read_bytes_from_buffer(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source_address", "length", NULL};
    PyObject *a, *b;
    uint64_t addr, len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:read_bytes_from_buffer", kwlist, &a, &b))
        return NULL;
    if (mcpy_arg_u64("read_bytes_from_buffer", "source_address", a, &addr) < 0 ||
        mcpy_arg_u64("read_bytes_from_buffer", "length", b, &len) < 0)
        return NULL;
    if (len > (uint64_t)PY_SSIZE_T_MAX || !mcpy_ranges_contain(self, addr, len)) {
        PyErr_Format(PyExc_ValueError,
                     "read_bytes_from_buffer(): [%p, +%llu) is not inside memory this "
                     "engine registered or allocated", /* PyErr_Format has no %llx */
                     (void *)(uintptr_t)addr, (unsigned long long)len);
        return NULL;
    }
    return PyBytes_FromStringAndSize(len ? (const char *)(uintptr_t)addr : "",
                                     (Py_ssize_t)len);
}

PyMethodDef mcpy_te_memory_methods[] = {
    {"initialize", KW te_initialize, KWFLAGS,
     "initialize(local_hostname: str, metadata_server: str, protocol: str, "
     "device_name: str) -> int\n\n"
     "Starts the engine. local_hostname: 'host' or 'host:port' (this engine's segment "
     "name; with P2PHANDSHAKE it becomes 'host:rpc_port'). metadata_server: "
     "'P2PHANDSHAKE', 'http://host:port/metadata', 'etcd://h:p' / bare 'h:p' (etcd), "
     "'redis://h:p'. protocol: 'tcp' ('rdma' without RDMA hardware works only with "
     "MC_FORCE_TCP=1, which falls back to TCP). device_name: NIC filter, ignored on TCP "
     "(None allowed).\n"
     "Returns 0, or a negative ErrorCode: INVALID_PARAMS (-600: bad string, already "
     "initialized), NOT_SUPPORTED (-1012: protocol), RPC_FAIL/RPC_TIMEOUT (-900/-901: "
     "metadata server unreachable), OBJECT_ALREADY_EXISTS (-705: the name is taken), "
     "INTERNAL_ERROR (-1: cannot bind). Upstream returns -1 for every failure. "
     "Upstream: TransferEnginePy::initialize."},
    {"initialize_ext", KW te_initialize_ext, KWFLAGS,
     "initialize_ext(local_hostname, metadata_server, protocol, device_name, "
     "metadata_type: str) -> int\n\n"
     "As initialize, but metadata_server is an address and metadata_type its backend "
     "('http', 'etcd', 'redis'): the connection string is metadata_type + '://' + "
     "metadata_server unless metadata_server is 'P2PHANDSHAKE' or already contains "
     "'://'. Returns as initialize. Upstream: TransferEnginePy::initializeExt."},
    {"get_rpc_port", (PyCFunction)te_get_rpc_port, METH_NOARGS,
     "get_rpc_port() -> int\n\nThe handshake (RPC) port peers use: with P2PHANDSHAKE "
     "peers address this engine as 'ip:port'. -1 before initialize. Upstream: "
     "TransferEnginePy::getRpcPort."},
    {"register_memory", KW te_register_memory, KWFLAGS,
     "register_memory(buffer_addr: int, capacity: int, location: str = '*') -> int\n\n"
     "Adds [buffer_addr, buffer_addr + capacity) bytes of this process's memory to the "
     "engine's segment: peers may then read and write it, and it may be the local side "
     "of transfers. The memory stays the caller's and must stay valid until "
     "unregister_memory. Registering the same address and capacity again is a no-op. "
     "Returns 0 or a negative ErrorCode (INVALID_PARAMS: not initialized, capacity 0, "
     "range overflows, same address with another capacity). Upstream: "
     "TransferEnginePy::registerMemory."},
    {"unregister_memory", KW te_unregister_memory, KWFLAGS,
     "unregister_memory(buffer_addr: int) -> int\n\nRemoves the buffer registered at "
     "buffer_addr (waits until no peer operation uses it). Returns 0 or a negative "
     "ErrorCode (INVALID_PARAMS: not registered). Upstream: "
     "TransferEnginePy::unregisterMemory."},
    {"batch_register_memory", KW te_batch_register_memory, KWFLAGS,
     "batch_register_memory(buffer_addresses: List[int], capacities: List[int], "
     "location: str = '*') -> int\n\n"
     "register_memory for each pair, all or nothing, one descriptor republish. Lists of "
     "different lengths return INVALID_PARAMS (-600). Returns 0 or a negative ErrorCode. "
     "Upstream: TransferEnginePy::batchRegisterMemory."},
    {"batch_unregister_memory", KW te_batch_unregister_memory, KWFLAGS,
     "batch_unregister_memory(buffer_addresses: List[int]) -> int\n\n"
     "unregister_memory for each address. Returns 0 or a negative ErrorCode. Upstream: "
     "TransferEnginePy::batchUnregisterMemory."},
    {"allocate_managed_buffer", KW te_allocate_managed_buffer, KWFLAGS,
     "allocate_managed_buffer(length: int) -> int\n\n"
     "length bytes of engine-owned, registered memory (shared-memory backed, so a "
     "same-host peer copies with one memcpy). Returns the address, or 0 on failure "
     "(length 0, not initialized, out of memory). Free with free_managed_buffer. "
     "Upstream: TransferEnginePy::allocateManagedBuffer."},
    {"free_managed_buffer", KW te_free_managed_buffer, KWFLAGS,
     "free_managed_buffer(buffer_addr: int, length: int) -> int\n\n"
     "Returns a block from allocate_managed_buffer; length must be the allocated length. "
     "Returns 0, or INVALID_PARAMS (-600) for an unknown block (upstream always returns "
     "0). Upstream: TransferEnginePy::freeManagedBuffer."},
    {"write_bytes_to_buffer", KW te_write_bytes_to_buffer, KWFLAGS,
     "write_bytes_to_buffer(dest_address: int, src: bytes, length: int) -> int\n\n"
     "Copies the first length bytes of src to dest_address. [dest_address, +length) "
     "must lie inside memory this engine registered or allocated, and length <= "
     "len(src); otherwise ValueError (nothing is written). Returns 0. Upstream: "
     "TransferEnginePy::writeBytesToBuffer."},
    {"read_bytes_from_buffer", KW te_read_bytes_from_buffer, KWFLAGS,
     "read_bytes_from_buffer(source_address: int, length: int) -> bytes\n\n"
     "A copy of length bytes at source_address, which must lie inside memory this "
     "engine registered or allocated (ValueError otherwise). Upstream: "
     "TransferEnginePy::readBytesFromBuffer."},
    {NULL, NULL, 0, NULL},
};
