/* engine_rpc.c: upstream's secondary RPC bindings of the engine module, RpcInterface
 * (alias CoroRPCInterface), ReceivedData and ReceivedTensor (upstream
 * rpc_interface.cpp / cororpc_interface.cpp; upstream-mooncake.md §2). They send bytes
 * and tensors between processes over a small TCP channel of our own, written in Python
 * (mooncake/_rpc_interface.py: protocol, threads, callbacks); this file puts those names
 * into mooncake.engine when the module is executed. GIL held. */
#include "engine_py.h"

int mcpy_engine_add_rpc(PyObject *m)
{
    static const char *const names[] = {"RpcInterface", "CoroRPCInterface", "ReceivedData",
                                        "ReceivedTensor"};
    PyObject *mod = PyImport_ImportModule("mooncake._rpc_interface");
    if (!mod)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && rc == 0; i++) {
        PyObject *o = PyObject_GetAttrString(mod, names[i]);
        rc = o ? PyModule_AddObjectRef(m, names[i], o) : -1;
        Py_XDECREF(o);
    }
    Py_DECREF(mod);
    return rc;
}
