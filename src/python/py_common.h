/* py_common.h: helpers shared by the CPython extension modules (mooncake.store,
 * mooncake.engine). Internal to src/python. */
#ifndef MC_PY_COMMON_H
#define MC_PY_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* mc__py_add_error_code: builds `ErrorCode`, an enum.IntEnum with one member per row of
 * MC_STATUS_TABLE (upstream names and numbers), and adds it to module as "ErrorCode"
 * with __module__ = module's name. Returns 0, or -1 with a Python exception set. */
int mc__py_add_error_code(PyObject *module);

/* mc__py_route_logs: installs a log sink that forwards C log messages to the Python
 * logger "mooncake" (level mapped to logging levels). Safe to call more than once.
 * Returns 0, or -1 with a Python exception set. */
int mc__py_route_logs(void);

#endif
