/* store_module.c: the `mooncake.store` extension module (CPython C API, no pybind11).
 * Contract: ../shared/API.md §1-§2; upstream: mooncake-integration/store/store_py.cpp.
 * At this stage it exposes ErrorCode; MooncakeDistributedStore lands with the store
 * client (issue "Store client and mooncake.store"). */
#include "py_common.h"

static struct PyModuleDef store_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.store",
    .m_doc = "Mooncake distributed KV-cache store (mooncake-c).\n\n"
             "ErrorCode: upstream status codes as an IntEnum.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_store(void);
PyMODINIT_FUNC PyInit_store(void)
{
    PyObject *m = PyModule_Create(&store_module);
    if (!m)
        return NULL;
    if (mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
