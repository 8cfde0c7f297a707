/* engine_module.c: the `mooncake.engine` extension module (CPython C API).
 * Contract: ../shared/API.md §3; upstream:
 * mooncake-integration/transfer_engine/transfer_engine_py.cpp. At this stage it exposes
 * ErrorCode; TransferEngine lands with the transfer-engine issue. */
#include "py_common.h"

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake.engine",
    .m_doc = "Mooncake transfer engine (mooncake-c).\n\n"
             "ErrorCode: upstream status codes as an IntEnum.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_engine(void);
PyMODINIT_FUNC PyInit_engine(void)
{
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    if (mc__py_add_error_code(m) < 0 || mc__py_route_logs() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
