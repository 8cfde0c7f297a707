/* py_common.h: helpers shared by the CPython extension modules (mooncake.store,
 * mooncake.engine). Internal to src/python. */
#ifndef MC_PY_COMMON_H
#define MC_PY_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Multi-phase init with module state (PyType_GetModuleByDef) needs CPython 3.11. */
#if PY_VERSION_HEX < 0x030B0000
#error "mooncake's extension modules need Python 3.11 or later"
#endif

/* mc__py_cstr: `o` as a C string for argument `name` of method `fn`: a str (UTF-8) or
 * bytes without NUL characters; None gives NULL when allow_none. *out is borrowed from
 * `o` (valid while `o` lives). Returns 0, or -1 with TypeError (wrong type) or
 * ValueError (a NUL character) set, the message naming fn and name. */
int mc__py_cstr(const char *fn, const char *name, PyObject *o, int allow_none,
                const char **out);

/* mc__py_int_enum: a new enum.IntEnum class `name` with `members` (a list of
 * (name, int) pairs, borrowed), __module__ = module's name and __doc__ = doc. Returns
 * a new reference, or NULL with a Python exception set. */
PyObject *mc__py_int_enum(PyObject *module, const char *name, PyObject *members,
                          const char *doc);

/* mc__py_add_error_code: builds `ErrorCode`, an enum.IntEnum with one member per row of
 * MC_STATUS_TABLE (upstream names and numbers), and adds it to module as "ErrorCode"
 * with __module__ = module's name. Returns 0, or -1 with a Python exception set. */
int mc__py_add_error_code(PyObject *module);

/* mc__py_route_logs: when MC_LOG_TO_PYTHON is true (common/env.h booleans), installs a
 * log sink that forwards C log messages to the Python logger "mooncake" (level mapped to
 * logging levels); the sink takes the GIL itself. Safe to call more than once. Returns
 * 0, or -1 with ValueError set (naming the variable) when MC_LOG_TO_PYTHON is not a
 * boolean. */
int mc__py_route_logs(void);

/* ---- Engine handles shared by mooncake.engine and mooncake.store ----
 * `mooncake.engine.TransferEngine().get_engine()` returns a handle that
 * `MooncakeDistributedStore.setup(..., engine=handle)` accepts (upstream passes an
 * InnerTransferEngine; API.md §3). The handle is a PyCapsule named MC_PY_TE_CAPSULE
 * whose pointer is the engine's `mc_te *` and whose context is a strong reference to
 * the Python object that owns that engine (the TransferEngine), so the engine lives at
 * least as long as the capsule. A Python object with an attribute `_mc_te` holding such
 * a capsule is accepted as well (so get_engine() may return a richer wrapper). */
#define MC_PY_TE_CAPSULE "mooncake.engine.mc_te"

struct mc_te;

/* mc__py_engine_handle_new: a new capsule for `te` (borrowed; must stay valid while
 * `owner` lives), keeping a strong reference to `owner` (not NULL) until the capsule is
 * freed. Returns a new reference, or NULL with a Python exception set. */
PyObject *mc__py_engine_handle_new(struct mc_te *te, PyObject *owner);

/* mc__py_engine_handle_get: the `mc_te *` behind `obj` (a capsule from
 * mc__py_engine_handle_new, or an object whose `_mc_te` attribute is one). On success
 * returns 0, sets *te, and *keep to a new reference the caller holds for as long as it
 * uses *te. Returns -1 with TypeError set (message names `engine`) otherwise. */
int mc__py_engine_handle_get(PyObject *obj, struct mc_te **te, PyObject **keep);

#endif
