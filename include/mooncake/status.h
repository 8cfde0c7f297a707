/* status.h: every status code of upstream Mooncake, from one X-macro table.
 *
 * Numbers and names are upstream's (`mooncake-store/include/types.h`, ErrorCode; see
 * ../shared/reference/upstream-mooncake.md §4.2). Public APIs, RPC replies, the master
 * and the store client return these values; internals of common/net/transfer return
 * -errno and convert once at the boundary (mc_status_from_errno).
 *
 * The same table generates the C enum, mc_strerror()/mc_status_name(), and the Python
 * `mooncake.store.ErrorCode` IntEnum (src/python/py_common.c).
 */
#ifndef MOONCAKE_STATUS_H
#define MOONCAKE_STATUS_H

#include <stddef.h>

#include "mooncake/mc_api.h"

/* X(NAME, value, short description) */
#define MC_STATUS_TABLE(X)                                                             \
    X(OK, 0, "success")                                                                \
    X(INTERNAL_ERROR, -1, "internal error")                                            \
    X(BUFFER_OVERFLOW, -10, "buffer too small or size out of range")                  \
    X(SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")                      \
    X(SEGMENT_NOT_FOUND, -101, "segment not found")                                    \
    X(SEGMENT_ALREADY_EXISTS, -102, "segment already mounted")                         \
    X(CLIENT_NOT_FOUND, -103, "client not found")                                      \
    X(NO_AVAILABLE_HANDLE, -200, "no space available in the memory pool")              \
    X(INVALID_VERSION, -300, "invalid version")                                        \
    X(INVALID_KEY, -400, "invalid key")                                                \
    X(WRITE_FAIL, -500, "write failed")                                                \
    X(INVALID_PARAMS, -600, "invalid parameters (or store not set up)")                \
    X(ILLEGAL_CLIENT, -601, "illegal client")                                          \
    X(INVALID_WRITE, -700, "invalid write")                                            \
    X(INVALID_READ, -701, "invalid read")                                              \
    X(INVALID_REPLICA, -702, "invalid replica")                                        \
    X(REPLICA_IS_NOT_READY, -703, "no complete replica yet (write in progress)")      \
    X(OBJECT_NOT_FOUND, -704, "object not found")                                      \
    X(OBJECT_ALREADY_EXISTS, -705, "object already exists")                            \
    X(OBJECT_HAS_LEASE, -706, "object is leased by a reader")                          \
    X(LEASE_EXPIRED, -707, "lease expired before the transfer finished")              \
    X(OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")              \
    X(OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")              \
    X(REPLICA_NOT_FOUND, -710, "replica not found")                                    \
    X(REPLICA_ALREADY_EXISTS, -711, "replica already exists")                          \
    X(REPLICA_IS_GONE, -712, "replica is gone")                                        \
    X(REPLICA_NOT_IN_LOCAL_MEMORY, -713, "replica is not in local memory")             \
    X(OBJECT_REPLICA_BUSY, -714, "object replica is busy")                             \
    X(TRANSFER_FAIL, -800, "transfer failed")                                          \
    X(CHECKSUM_MISMATCH, -801, "checksum mismatch")                                    \
    X(RPC_FAIL, -900, "RPC failed")                                                    \
    X(RPC_TIMEOUT, -901, "RPC timed out")                                              \
    X(ETCD_OPERATION_ERROR, -1000, "etcd operation failed")                            \
    X(ETCD_KEY_NOT_EXIST, -1001, "etcd key does not exist")                            \
    X(ETCD_TRANSACTION_FAIL, -1002, "etcd transaction failed")                         \
    X(ETCD_CTX_CANCELLED, -1003, "etcd context cancelled")                             \
    X(OPLOG_ENTRY_NOT_FOUND, -1004, "oplog entry not found")                           \
    X(K8S_LEASE_OPERATION_ERROR, -1005, "k8s lease operation failed")                  \
    X(K8S_LEASE_NOT_FOUND, -1006, "k8s lease not found")                               \
    X(INCOMPLETE_OPLOG_CATCH_UP, -1007, "oplog catch-up incomplete")                   \
    X(UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable in the current status")       \
    X(UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in the current mode")           \
    X(NOT_SUPPORTED, -1012, "not supported")                                           \
    X(FILE_NOT_FOUND, -1100, "file not found")                                         \
    X(FILE_OPEN_FAIL, -1101, "file open failed")                                       \
    X(FILE_READ_FAIL, -1102, "file read failed")                                       \
    X(FILE_WRITE_FAIL, -1103, "file write failed")                                     \
    X(FILE_INVALID_BUFFER, -1104, "invalid file buffer")                               \
    X(FILE_LOCK_FAIL, -1105, "file lock failed")                                       \
    X(FILE_INVALID_HANDLE, -1106, "invalid file handle")                               \
    X(BUCKET_NOT_FOUND, -1200, "bucket not found")                                     \
    X(BUCKET_ALREADY_EXISTS, -1201, "bucket already exists")                           \
    X(KEYS_EXCEED_BUCKET_LIMIT, -1202, "keys exceed the bucket limit")                 \
    X(KEYS_ULTRA_LIMIT, -1203, "keys exceed the limit")                                \
    X(UNABLE_OFFLOAD, -1300, "unable to offload")                                      \
    X(UNABLE_OFFLOADING, -1301, "offload in progress")                                 \
    X(TASK_NOT_FOUND, -1400, "task not found")                                         \
    X(TASK_PENDING_LIMIT_EXCEEDED, -1401, "too many pending tasks")                    \
    X(JOB_NOT_FOUND, -1402, "job not found")                                           \
    X(SERIALIZE_UNSUPPORTED, -1500, "serialization not supported")                     \
    X(SERIALIZE_FAIL, -1501, "serialization failed")                                   \
    X(DESERIALIZE_FAIL, -1502, "deserialization failed")                               \
    X(PERSISTENT_FAIL, -1503, "persistence failed")                                    \
    X(DFS_NETWORK_TIMEOUT, -1600, "DFS network timeout")                               \
    X(DFS_SERVICE_UNAVAILABLE, -1601, "DFS service unavailable")                       \
    X(DFS_QUOTA_EXCEEDED, -1602, "DFS quota exceeded")                                 \
    X(DFS_PERMISSION_DENIED, -1603, "DFS permission denied")                           \
    X(DFS_STALE_HANDLE, -1604, "DFS stale handle")                                     \
    X(DFS_PARTIAL_WRITE, -1605, "DFS partial write")                                   \
    X(TENANT_QUOTA_EXCEEDED, -1700, "tenant quota exceeded")                           \
    X(TENANT_NOT_REGISTERED, -1701, "tenant not registered")                           \
    X(TENANT_NOT_EMPTY, -1702, "tenant not empty")

/* mc_status: the C enum, MC_<NAME> = upstream value. */
typedef enum mc_status {
#define MC__STATUS_ENUM(name, value, msg) MC_##name = (value),
    MC_STATUS_TABLE(MC__STATUS_ENUM)
#undef MC__STATUS_ENUM
} mc_status;

/* One row of the table, for code that walks it (Python binding, docs, tests). */
typedef struct mc_status_info {
    const char *name; /* upstream enum name, e.g. "OBJECT_NOT_FOUND" */
    int value;        /* upstream number, e.g. -704 */
    const char *msg;  /* short human description */
} mc_status_info;

/* mc_status_table: every row of MC_STATUS_TABLE in table order.
 * Returns a borrowed static array; *count receives its length. Thread-safe. */
MC_API const mc_status_info *mc_status_table(size_t *count);

/* mc_strerror: short description of a status code ("object not found").
 * Unknown codes give "unknown status code". Returns a static string. Thread-safe. */
MC_API const char *mc_strerror(int status);

/* mc_status_name: upstream enum name of a status code ("OBJECT_NOT_FOUND"), or NULL
 * when the value is not in the table. Returns a static string. Thread-safe. */
MC_API const char *mc_status_name(int status);

/* mc_status_from_name: the value of an upstream enum name; 1 (not a status) when the
 * name is unknown. */
MC_API int mc_status_from_name(const char *name);

/* mc_status_from_errno: the one place internal -errno values become status codes.
 * err is a negative errno (or 0). ETIMEDOUT -> RPC_TIMEOUT, EINVAL -> INVALID_PARAMS,
 * ENOMEM/ENOSPC -> NO_AVAILABLE_HANDLE, EFAULT/ERANGE -> INVALID_PARAMS, ENOENT ->
 * OBJECT_NOT_FOUND, connection errors -> TRANSFER_FAIL, others -> INTERNAL_ERROR. */
MC_API int mc_status_from_errno(int err);

#endif
