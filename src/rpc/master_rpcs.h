/* rpc/master_rpcs.h: THE table of the master's RPCs (header-only; tokens, no types, so
 * the master, the client and tools may include it without protobuf). Everything that
 * lists the RPCs is generated from it: the opcode dispatch and opcode names
 * (src/master/rpc_handler.c), the per-operation metric enums and names
 * (src/master/master_service.h, "master_<NAME>_requests_total" & co.), the reply check
 * of the RPC fuzzer and the command list of tools/mooncake_master_ctl.c. Adding an RPC
 * = one row here + its messages in proto/master.proto (+ a shape, when new).
 *
 * MC_MASTER_RPC_TABLE(X) calls, once per RPC,
 *   X(ID, CODE, NAME, VERB, REQ, REPLY, SHAPE, HANDLER, COUNT)
 *     ID       upper-case stem: the proto opcode is MCRPC__OPCODE__OP_<ID>
 *     CODE     its number (the frame's u16 opcode; rpc_handler.c checks it equals the
 *              proto's)
 *     NAME     the RPC's name (mc_master_rpc_opcode_name) and its metric stem
 *     VERB     the mooncake_master_ctl command that calls it
 *     REQ      protobuf-c stem of the request message (mcrpc__<REQ>__unpack, ...)
 *     REPLY    protobuf-c stem of the reply message (mcrpc__<REPLY>__descriptor, ...)
 *     SHAPE    how the request maps onto the service: rpc_handler.c has one handler and
 *              mooncake_master_ctl.c one command runner per shape
 *     HANDLER  the mc_master_service_* function the RPC runs (NULL: answered by the RPC
 *              layer itself)
 *     COUNT    OP: a single-key/single-call op counted as MC_MASTER_OP_<ID>; BATCH: a
 *              batch family counted as MC_MASTER_<ID> (ID starts with BATCH_); NONE: not
 *              counted
 * Rows are in metric order (OP rows in mc_master_op order, BATCH rows in
 * mc_master_batch_op order, as /metrics lists them); opcodes need no order.
 */
#ifndef MOONCAKE_RPC_MASTER_RPCS_H
#define MOONCAKE_RPC_MASTER_RPCS_H

/* clang-format off */
#define MC_MASTER_RPC_TABLE(X)                                                              \
    X(PUT_START, 20, "put_start", "put_start", put_start_request, put_start_reply,          \
      START, mc_master_service_put_start, OP)                                               \
    X(PUT_END, 21, "put_end", "put_end", key_request, status_reply,                         \
      KEY, mc_master_service_put_end, OP)                                                   \
    X(PUT_REVOKE, 22, "put_revoke", "put_revoke", key_request, status_reply,                \
      KEY, mc_master_service_put_revoke, OP)                                                \
    X(UPSERT_START, 30, "upsert_start", "upsert_start", put_start_request, put_start_reply, \
      START, mc_master_service_upsert_start, OP)                                            \
    X(UPSERT_END, 31, "upsert_end", "upsert_end", key_request, status_reply,                \
      KEY, mc_master_service_upsert_end, OP)                                                \
    X(UPSERT_REVOKE, 32, "upsert_revoke", "upsert_revoke", key_request, status_reply,       \
      KEY, mc_master_service_upsert_revoke, OP)                                             \
    X(GET_REPLICA_LIST, 40, "get_replica_list", "get", key_request,                         \
      get_replica_list_reply, GET, mc_master_service_get_replica_list, OP)                  \
    X(GET_REPLICA_LIST_BY_REGEX, 42, "get_replica_list_by_regex", "get_regex",              \
      regex_request, get_replica_list_by_regex_reply, GET_REGEX,                            \
      mc_master_service_get_replica_list_by_regex, OP)                                      \
    X(EXIST_KEY, 50, "exist_key", "exist", key_request, exist_key_reply,                    \
      EXIST, mc_master_service_exist_key, OP)                                               \
    X(REMOVE, 60, "remove", "remove", key_request, status_reply,                            \
      REMOVE, mc_master_service_remove, OP)                                                 \
    X(REMOVE_BY_REGEX, 62, "remove_by_regex", "remove_regex", regex_request, count_reply,   \
      REMOVE_REGEX, mc_master_service_remove_by_regex, OP)                                  \
    X(REMOVE_ALL, 63, "remove_all", "remove_all", remove_all_request, count_reply,          \
      REMOVE_ALL, mc_master_service_remove_all, OP)                                         \
    X(MOUNT_SEGMENT, 10, "mount_segment", "mount", mount_segment_request, status_reply,     \
      MOUNT, mc_master_service_mount_segment, OP)                                           \
    X(UNMOUNT_SEGMENT, 12, "unmount_segment", "unmount", unmount_segment_request,           \
      status_reply, UNMOUNT, mc_master_service_unmount_segment_grace, OP)                   \
    X(REMOUNT_SEGMENT, 11, "remount_segment", "remount", remount_segment_request,           \
      status_reply, REMOUNT, mc_master_service_remount_segments, OP)                        \
    X(PING, 1, "ping", "ping", ping_request, ping_reply,                                    \
      PING, mc_master_service_ping_fences, OP)                                              \
    X(SERVICE_READY, 2, "service_ready", "service_ready", service_ready_request,            \
      service_ready_reply, READY, NULL, NONE)                                               \
    X(BATCH_EXIST_KEY, 51, "batch_exist_key", "batch_exist", batch_keys_request,            \
      batch_exist_key_reply, BATCH_EXIST, mc_master_service_batch_exist_key, BATCH)         \
    X(BATCH_GET_REPLICA_LIST, 41, "batch_get_replica_list", "batch_get",                    \
      batch_keys_request, batch_get_replica_list_reply, BATCH_GET,                          \
      mc_master_service_batch_get_replica_list, BATCH)                                      \
    X(BATCH_PUT_START, 23, "batch_put_start", "batch_put_start", batch_put_start_request,   \
      batch_put_start_reply, BATCH_START, mc_master_service_batch_put_start, BATCH)         \
    X(BATCH_PUT_END, 24, "batch_put_end", "batch_put_end", batch_keys_request,              \
      batch_status_reply, BATCH_KEY, mc_master_service_batch_put_end, BATCH)                \
    X(BATCH_PUT_REVOKE, 25, "batch_put_revoke", "batch_put_revoke", batch_keys_request,     \
      batch_status_reply, BATCH_KEY, mc_master_service_batch_put_revoke, BATCH)             \
    X(BATCH_UPSERT_START, 33, "batch_upsert_start", "batch_upsert_start",                   \
      batch_put_start_request, batch_put_start_reply, BATCH_START,                          \
      mc_master_service_batch_upsert_start, BATCH)                                          \
    X(BATCH_UPSERT_END, 34, "batch_upsert_end", "batch_upsert_end", batch_keys_request,     \
      batch_status_reply, BATCH_KEY, mc_master_service_batch_upsert_end, BATCH)             \
    X(BATCH_UPSERT_REVOKE, 35, "batch_upsert_revoke", "batch_upsert_revoke",                \
      batch_keys_request, batch_status_reply, BATCH_KEY,                                    \
      mc_master_service_batch_upsert_revoke, BATCH)                                         \
    X(BATCH_REMOVE, 61, "batch_remove", "batch_remove", batch_keys_request,                 \
      batch_status_reply, BATCH_REMOVE, mc_master_service_batch_remove, BATCH)             \
    X(BATCH_REPLICA_CLEAR, 64, "batch_replica_clear", "batch_replica_clear",                \
      batch_keys_request, batch_status_reply, BATCH_CLEAR,                                  \
      mc_master_service_batch_replica_clear, BATCH)                                       \
    X(OFFLOAD_HEARTBEAT, 70, "offload_heartbeat", "offload_heartbeat",                     \
      offload_heartbeat_request, offload_heartbeat_reply, OFFLOAD_HB,                       \
      mc_master_service_offload_heartbeat, OP)                                              \
    X(OFFLOAD_END, 71, "offload_end", "offload_end", offload_end_request,                   \
      batch_status_reply, OFFLOAD_END, mc_master_service_offload_end, OP)                   \
    X(CREATE_COPY_TASK, 80, "create_copy_task", "create_copy_task", create_task_request,   \
      create_task_reply, TASK_CREATE, mc_master_service_create_copy_task, OP)               \
    X(CREATE_MOVE_TASK, 81, "create_move_task", "create_move_task", create_task_request,   \
      create_task_reply, TASK_CREATE, mc_master_service_create_move_task, OP)               \
    X(QUERY_TASK, 82, "query_task", "query_task", query_task_request, query_task_reply,    \
      TASK_QUERY, mc_master_service_query_task, OP)                                         \
    X(FETCH_TASKS, 83, "fetch_tasks", "fetch_tasks", fetch_tasks_request,                  \
      fetch_tasks_reply, TASK_FETCH, mc_master_service_fetch_tasks, OP)                     \
    X(MARK_TASK_TO_COMPLETE, 84, "mark_task_to_complete", "mark_task_to_complete",         \
      mark_task_request, status_reply, TASK_MARK, mc_master_service_mark_task_to_complete,  \
      OP)                                                                                    \
    X(FETCH_LOG, 85, "fetch_log", "fetch_log", fetch_log_request, fetch_log_reply,          \
      FETCH_LOG, mc_master_service_fetch_log, NONE)                                          \
    X(FETCH_SNAPSHOT, 86, "fetch_snapshot", "fetch_snapshot", fetch_snapshot_request,       \
      fetch_snapshot_reply, FETCH_SNAPSHOT, mc_master_service_fetch_snapshot, NONE)
/* clang-format on */

/* Row filters on COUNT for generators: MC__RPC_IF_OP_##COUNT(...) keeps its arguments
 * for OP rows only, MC__RPC_IF_BATCH_##COUNT(...) for BATCH rows only. */
#define MC__RPC_IF_OP_OP(...) __VA_ARGS__
#define MC__RPC_IF_OP_BATCH(...)
#define MC__RPC_IF_OP_NONE(...)
#define MC__RPC_IF_BATCH_OP(...)
#define MC__RPC_IF_BATCH_BATCH(...) __VA_ARGS__
#define MC__RPC_IF_BATCH_NONE(...)

/* MC_MASTER_RPC_OPCODE_<ID>: the opcode numbers, for code that has no protobuf. */
enum {
#define MC__RPC_OPCODE(ID, CODE, ...) MC_MASTER_RPC_OPCODE_##ID = CODE,
    MC_MASTER_RPC_TABLE(MC__RPC_OPCODE)
#undef MC__RPC_OPCODE
};

#endif
