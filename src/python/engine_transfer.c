/* engine_transfer.c: TransferEngine's transfer methods: transfer_sync(_read/_write),
 * batch_transfer_sync*, batch_transfer_async*, transfer_submit_write,
 * get_batch_transfer_status, transfer_check_status. Local ranges are checked against the
 * tracked table (engine_memory.c) before anything moves; transfers and waits run with
 * the GIL released. */
#include "engine_py.h"

#include <stdio.h>
#include <string.h>

#include "mooncake/log.h"
#include "mooncake/status.h"

/* Checks the local side of n requests: each [local, local+len) inside tracked memory,
 * and no remote range wrapping around 2**64. Returns MC_OK or MC_INVALID_PARAMS (logged). */
static int check_requests(TEObject *self, const char *fn, const uint64_t *local,
                          const uint64_t *remote, const uint64_t *lens, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0)
            continue;
        if (remote[i] + lens[i] < remote[i]) {
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "%s: request %zu: peer range 0x%llx + %llu overflows", fn, i,
                   (unsigned long long)remote[i], (unsigned long long)lens[i]);
            return MC_INVALID_PARAMS;
        }
        if (!mcpy_ranges_contain(self, local[i], lens[i])) {
            mc_log(MC_LOG_ERROR, PY_TAG,
                   "%s: request %zu: local buffer [0x%llx, +%llu) is not inside memory "
                   "registered with this engine",
                   fn, i, (unsigned long long)local[i], (unsigned long long)lens[i]);
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

/* A sync transfer of n requests: 0 or a negative status code. */
static PyObject *do_sync(TEObject *self, const char *fn, const char *target, int op,
                         const uint64_t *local, const uint64_t *remote, const uint64_t *lens,
                         size_t n, const notify_bytes *nb)
{
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(MC_INVALID_PARAMS);
    int rc = check_requests(self, fn, local, remote, lens, n);
    if (rc != MC_OK)
        return ret_int(rc);
    /* the notify bytes are owned by the caller's nb and outlive the GIL-free call */
    const char *nname = nb && nb->name ? PyBytes_AS_STRING(nb->name) : NULL;
    const char *nmsg = nb && nb->msg ? PyBytes_AS_STRING(nb->msg) : NULL;
    size_t nlen = nb && nb->msg ? (size_t)PyBytes_GET_SIZE(nb->msg) : 0;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_te_transfer_sync(te, target, op, local, remote, lens, n, nname, nmsg, nlen);
    Py_END_ALLOW_THREADS
    return ret_int(rc);
}

/* An async submit of n requests: the batch id, or 0 on any failure. */
static PyObject *do_async(TEObject *self, const char *fn, const char *target, int op,
                          const uint64_t *local, const uint64_t *remote, const uint64_t *lens,
                          size_t n)
{
    mc_te *te = te_of(self);
    if (!te || check_requests(self, fn, local, remote, lens, n) != MC_OK)
        return PyLong_FromLong(0);
    mc_te_batch_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (n == 0)
        rc = mc_te_allocate_batch(te, 1, &id); /* an empty batch: completes at once */
    else
        rc = mc_te_transfer_async(te, target, op, local, remote, lens, n, &id);
    Py_END_ALLOW_THREADS
    if (rc != MC_OK)
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong((unsigned long long)id);
}

/* Parses (target_hostname, buffer, peer_buffer_address, length) from a, b, c, d. */
static int parse_single(const char *fn, PyObject *a, PyObject *b, PyObject *c, PyObject *d,
                        PyObject *hint, const char **target, uint64_t *local,
                        uint64_t *remote, uint64_t *len)
{
    const char *h;
    if (mcpy_arg_str(fn, "target_hostname", a, 0, target) < 0 ||
        mcpy_arg_u64(fn, "buffer", b, local) < 0 ||
        mcpy_arg_u64(fn, "peer_buffer_address", c, remote) < 0 ||
        mcpy_arg_u64(fn, "length", d, len) < 0 ||
        (hint && mcpy_arg_str(fn, "transport_hint", hint, 0, &h) < 0))
        return -1;
    return 0;
}

typedef struct {
    const char *target;
    uint64_t *local, *remote, *lens;
    size_t n;
    int mismatch; /* the three lists have different lengths */
} batch_args;

static void batch_args_free(batch_args *ba)
{
    PyMem_Free(ba->local);
    PyMem_Free(ba->remote);
    PyMem_Free(ba->lens);
}

static int parse_batch(const char *fn, PyObject *a, PyObject *b, PyObject *c, PyObject *d,
                       PyObject *hint, batch_args *ba)
{
    size_t n1 = 0, n2 = 0, n3 = 0;
    const char *h;
    memset(ba, 0, sizeof(*ba));
    if (mcpy_arg_str(fn, "target_hostname", a, 0, &ba->target) < 0 ||
        mcpy_arg_u64_list(fn, "buffers", b, &ba->local, &n1) < 0 ||
        mcpy_arg_u64_list(fn, "peer_buffer_addresses", c, &ba->remote, &n2) < 0 ||
        mcpy_arg_u64_list(fn, "lengths", d, &ba->lens, &n3) < 0 ||
        (hint && mcpy_arg_str(fn, "transport_hint", hint, 0, &h) < 0)) {
        batch_args_free(ba);
        return -1;
    }
    ba->n = n1;
    if (n1 != n2 || n1 != n3) {
        mc_log(MC_LOG_ERROR, PY_TAG,
               "%s: buffers, peer_buffer_addresses and lengths have different sizes "
               "(%zu, %zu, %zu)",
               fn, n1, n2, n3);
        ba->mismatch = 1;
    }
    return 0;
}

/* single_run: transfer_sync_{write,read} and transfer_submit_write (async: returns the
 * batch id) with (target_hostname, buffer, peer_buffer_address, length[,
 * transport_hint]); op < 0 (sync only): `opcode` and an optional `notify` follow
 * `length` (transfer_sync). */
static PyObject *single_run(TEObject *self, PyObject *args, PyObject *kw, const char *fn,
                            int op, bool async)
{
    static char *kwlist[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                             "transport_hint", NULL};
    static char *kwlist_opn[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                                 "opcode", "notify", "transport_hint", NULL};
    PyObject *a, *b, *c, *d, *e = NULL, *f = NULL, *hint = NULL, *res;
    const char *target;
    uint64_t local, remote, len;
    notify_bytes nb = {NULL, NULL};
    char fmt[64];
    int ok;
    mcpy_te_state *st = mcpy_te_state_of((PyObject *)self);
    if (!st)
        return NULL;
    if (op < 0) {
        snprintf(fmt, sizeof(fmt), "OOOOO|OO:%s", fn);
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_opn, &a, &b, &c, &d, &e, &f,
                                         &hint);
    } else {
        snprintf(fmt, sizeof(fmt), "OOOO|O:%s", fn);
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &a, &b, &c, &d, &hint);
    }
    if (!ok || parse_single(fn, a, b, c, d, hint, &target, &local, &remote, &len) < 0)
        return NULL;
    if (op < 0 && (mcpy_arg_opcode(fn, e, &op) < 0 || mcpy_arg_notify(st, fn, f, &nb) < 0))
        return NULL;
    if (async)
        return do_async(self, fn, target, op, &local, &remote, &len, 1);
    res = do_sync(self, fn, target, op, &local, &remote, &len, 1, &nb);
    Py_XDECREF(nb.name);
    Py_XDECREF(nb.msg);
    return res;
}

static PyObject *te_transfer_sync_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync_write", MC_TE_OP_WRITE, false);
}

static PyObject *te_transfer_sync_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync_read", MC_TE_OP_READ, false);
}

static PyObject *te_transfer_sync(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_sync", -1, false);
}

/* batch_run: batch_transfer_{sync,async}_{write,read}(target_hostname, buffers,
 * peer_buffer_addresses, lengths[, transport_hint]); op < 0: an `opcode` argument
 * follows `lengths` (batch_transfer_async), then for sync an optional `notify`
 * (batch_transfer_sync). Unequal list lengths give MC_INVALID_PARAMS (sync) or batch
 * id 0 (async) without transferring anything. */
static PyObject *batch_run(TEObject *self, PyObject *args, PyObject *kw, const char *fn,
                           int op, bool async)
{
    static char *kwlist[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                             "lengths", "transport_hint", NULL};
    static char *kwlist_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                "lengths", "opcode", "transport_hint", NULL};
    static char *kwlist_opn[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                 "lengths", "opcode", "notify", "transport_hint", NULL};
    PyObject *a, *b, *c, *d, *e = NULL, *f = NULL, *hint = NULL, *res;
    batch_args ba;
    notify_bytes nb = {NULL, NULL};
    char fmt[64];
    int ok;
    bool with_op = op < 0, with_notify = op < 0 && !async;
    mcpy_te_state *st = mcpy_te_state_of((PyObject *)self);
    if (!st)
        return NULL;
    snprintf(fmt, sizeof(fmt), "%s|%s:%s", with_op ? "OOOOO" : "OOOO",
             with_notify ? "OO" : "O", fn);
    if (with_notify)
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_opn, &a, &b, &c, &d, &e, &f,
                                         &hint);
    else if (with_op)
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist_op, &a, &b, &c, &d, &e, &hint);
    else
        ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &a, &b, &c, &d, &hint);
    if (!ok || parse_batch(fn, a, b, c, d, hint, &ba) < 0)
        return NULL;
    if ((with_op && mcpy_arg_opcode(fn, e, &op) < 0) ||
        (with_notify && mcpy_arg_notify(st, fn, f, &nb) < 0)) {
        batch_args_free(&ba);
        return NULL;
    }
    if (ba.mismatch)
        res = async ? PyLong_FromLong(0) : ret_int(MC_INVALID_PARAMS);
    else if (async)
        res = do_async(self, fn, ba.target, op, ba.local, ba.remote, ba.lens, ba.n);
    else
        res = do_sync(self, fn, ba.target, op, ba.local, ba.remote, ba.lens, ba.n, &nb);
    Py_XDECREF(nb.name);
    Py_XDECREF(nb.msg);
    batch_args_free(&ba);
    return res;
}

static PyObject *te_batch_transfer_sync_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync_write", MC_TE_OP_WRITE, false);
}

static PyObject *te_batch_transfer_sync_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync_read", MC_TE_OP_READ, false);
}

static PyObject *te_batch_transfer_sync(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_sync", -1, false);
}

static PyObject *te_batch_transfer_async_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async_write", MC_TE_OP_WRITE, true);
}

static PyObject *te_batch_transfer_async_read(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async_read", MC_TE_OP_READ, true);
}

static PyObject *te_batch_transfer_async(TEObject *self, PyObject *args, PyObject *kw)
{
    return batch_run(self, args, kw, "batch_transfer_async", -1, true);
}

static PyObject *te_transfer_submit_write(TEObject *self, PyObject *args, PyObject *kw)
{
    return single_run(self, args, kw, "transfer_submit_write", MC_TE_OP_WRITE, true);
}

static PyObject *te_get_batch_transfer_status(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"batch_ids", NULL};
    PyObject *a;
    uint64_t *ids = NULL;
    size_t n = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_batch_transfer_status", kwlist, &a))
        return NULL;
    if (mcpy_arg_u64_list("get_batch_transfer_status", "batch_ids", a, &ids, &n) < 0)
        return NULL;
    mc_te *te = te_of(self);
    int result = te ? MC_OK : MC_INVALID_PARAMS;
    if (te) {
        Py_BEGIN_ALLOW_THREADS
        /* Every batch is waited for (each is bounded by the engine's transfer timeout)
         * and freed, so none is left behind; the first failure is reported. */
        for (size_t i = 0; i < n; i++) {
            mc_te_status st;
            int rc = mc_te_wait_batch(te, ids[i], -1, &st);
            if (rc == MC_OK) {
                mc_te_free_batch(te, ids[i]);
                if (st.state != MC_TE_COMPLETED)
                    rc = st.error != MC_OK ? st.error
                         : st.state == MC_TE_TIMEOUT ? MC_RPC_TIMEOUT
                                                     : MC_TRANSFER_FAIL;
            }
            if (rc != MC_OK && result == MC_OK)
                result = rc;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(ids);
    return ret_int(result);
}

static PyObject *te_transfer_check_status(TEObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"batch_id", NULL};
    PyObject *a;
    uint64_t id;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:transfer_check_status", kwlist, &a))
        return NULL;
    if (mcpy_arg_u64("transfer_check_status", "batch_id", a, &id) < 0)
        return NULL;
    mc_te *te = te_of(self);
    if (!te)
        return ret_int(-1);
    /* a poll: no wait, so the GIL stays held; every final state frees the batch */
    mc_te_status st;
    int rc = mc_te_get_batch_status(te, id, &st);
    if (rc != MC_OK)
        return ret_int(-1);
    switch (st.state) {
    case MC_TE_COMPLETED:
        mc_te_free_batch(te, id);
        return ret_int(1);
    case MC_TE_TIMEOUT:
        mc_te_free_batch(te, id);
        return ret_int(-2);
    case MC_TE_WAITING:
    case MC_TE_PENDING:
        return ret_int(0);
    default:
        mc_te_free_batch(te, id);
        return ret_int(-1);
    }
}

PyMethodDef mcpy_te_transfer_methods[] = {
    {"transfer_sync_write", KW te_transfer_sync_write, KWFLAGS,
     "transfer_sync_write(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Writes length bytes from local buffer (inside memory registered with this engine) "
     "to peer_buffer_address in the peer's registered memory, and waits. "
     "target_hostname is the peer's segment name ('ip:rpc_port' with P2PHANDSHAKE). "
     "Returns 0, or a negative ErrorCode: INVALID_PARAMS (-600: local range not "
     "registered, peer refused the range, overflow), SEGMENT_NOT_FOUND (-101: unknown "
     "peer), TRANSFER_FAIL (-800: connection lost), RPC_TIMEOUT (-901: not done within "
     "MC_TRANSFER_TIMEOUT s + 1 ns/byte). transport_hint is accepted and ignored "
     "(upstream honours it only with TENT). Upstream: TransferEnginePy::transferSyncWrite "
     "(which returns -1 for every failure)."},
    {"transfer_sync_read", KW te_transfer_sync_read, KWFLAGS,
     "transfer_sync_read(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Reads length bytes at peer_buffer_address of the peer into local buffer, and "
     "waits. Returns as transfer_sync_write. Upstream: TransferEnginePy::transferSyncRead."},
    {"transfer_sync", KW te_transfer_sync, KWFLAGS,
     "transfer_sync(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, opcode: TransferOpcode, notify: TransferNotify = None, "
     "transport_hint: str = '') -> int\n\n"
     "transfer_sync_read (opcode Read) or transfer_sync_write (Write); with notify, the "
     "peer receives it (get_notifies) after the data has landed, and the call returns "
     "once the peer acknowledged it. Returns as transfer_sync_write. Upstream: "
     "TransferEnginePy::transferSync."},
    {"batch_transfer_sync_write", KW te_batch_transfer_sync_write, KWFLAGS,
     "batch_transfer_sync_write(target_hostname: str, buffers: List[int], "
     "peer_buffer_addresses: List[int], lengths: List[int], transport_hint: str = '') "
     "-> int\n\n"
     "Writes buffers[i] -> peer_buffer_addresses[i], lengths[i] bytes each, to one peer "
     "and waits for all. Lists of different lengths return INVALID_PARAMS (-600); empty "
     "lists return 0. Returns 0 when every byte moved, else the first failure's negative "
     "ErrorCode (as transfer_sync_write). Upstream: "
     "TransferEnginePy::batchTransferSyncWrite."},
    {"batch_transfer_sync_read", KW te_batch_transfer_sync_read, KWFLAGS,
     "batch_transfer_sync_read(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "transport_hint='') -> int\n\n"
     "Reads peer_buffer_addresses[i] -> buffers[i]. Returns as batch_transfer_sync_write. "
     "Upstream: TransferEnginePy::batchTransferSyncRead."},
    {"batch_transfer_sync", KW te_batch_transfer_sync, KWFLAGS,
     "batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "opcode: TransferOpcode, notify: TransferNotify = None, transport_hint='') -> int\n\n"
     "batch_transfer_sync_read/write by opcode; notify as in transfer_sync (delivered "
     "after all the data; with empty lists it is sent alone). Upstream: "
     "TransferEnginePy::batchTransferSync."},
    {"batch_transfer_async_write", KW te_batch_transfer_async_write, KWFLAGS,
     "batch_transfer_async_write(target_hostname, buffers, peer_buffer_addresses, "
     "lengths, transport_hint='') -> int\n\n"
     "Starts the writes and returns a batch id (> 0) at once, or 0 on failure (unknown "
     "peer, lists of different lengths, local range not registered, submit refused). "
     "Wait with get_batch_transfer_status([id]) or poll transfer_check_status(id); both "
     "free the batch when it is over. Upstream: TransferEnginePy::batchTransferAsyncWrite."},
    {"batch_transfer_async_read", KW te_batch_transfer_async_read, KWFLAGS,
     "batch_transfer_async_read(target_hostname, buffers, peer_buffer_addresses, "
     "lengths, transport_hint='') -> int\n\n"
     "As batch_transfer_async_write, reading. Upstream: "
     "TransferEnginePy::batchTransferAsyncRead."},
    {"batch_transfer_async", KW te_batch_transfer_async, KWFLAGS,
     "batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, "
     "opcode: TransferOpcode, transport_hint='') -> int\n\n"
     "batch_transfer_async_read/write by opcode. Returns a batch id or 0. Upstream: "
     "TransferEnginePy::batchTransferAsync."},
    {"get_batch_transfer_status", KW te_get_batch_transfer_status, KWFLAGS,
     "get_batch_transfer_status(batch_ids: List[int]) -> int\n\n"
     "Blocks until every listed batch is over (each is bounded by MC_TRANSFER_TIMEOUT s "
     "+ 1 ns per byte) and frees them all. Returns 0 when all completed, else the first "
     "failure's negative ErrorCode (TRANSFER_FAIL, RPC_TIMEOUT, INVALID_PARAMS for an "
     "unknown or already freed id). Upstream: TransferEnginePy::getBatchTransferStatus "
     "(0 / -1; it stops at the first failure)."},
    {"transfer_submit_write", KW te_transfer_submit_write, KWFLAGS,
     "transfer_submit_write(target_hostname: str, buffer: int, peer_buffer_address: int, "
     "length: int, transport_hint: str = '') -> int\n\n"
     "Starts one write and returns its batch id (> 0), or 0 on failure. Poll with "
     "transfer_check_status. Upstream: TransferEnginePy::transferSubmitWrite."},
    {"transfer_check_status", KW te_transfer_check_status, KWFLAGS,
     "transfer_check_status(batch_id: int) -> int\n\n"
     "1: completed (the batch is freed); 0: still running; -1: failed or unknown id "
     "(freed); -2: timed out (freed). Upstream: TransferEnginePy::transferCheckStatus "
     "(which keeps a timed-out batch)."},
    {NULL, NULL, 0, NULL},
};
