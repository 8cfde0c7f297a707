/* rpc/limits.h: wire limits of the master RPC (proto/master.proto), shared by the server
 * (src/master/rpc_server.c) and the client library (src/client/master_client.c). */
#ifndef MOONCAKE_RPC_LIMITS_H
#define MOONCAKE_RPC_LIMITS_H

/* Limits of one request (checked by the master after decoding, before the service runs;
 * the client splits larger batches). */
#define MC_MASTER_RPC_MAX_BATCH 1024u             /* keys / segments per request     */
#define MC_MASTER_RPC_MAX_BODY (16u << 20)        /* bytes of one request body       */
/* Bytes a decoder may allocate for one body (protobuf-c structs; see rpc_arena.h). */
#define MC_MASTER_RPC_DECODE_LIMIT (64u << 20)
#define MC_MASTER_RPC_MAX_REPLY_BODY (64u << 20)  /* bytes of one reply body (client) */
/* get_replica_list_by_regex stops collecting (reply.truncated = true) past this many
 * estimated reply bytes. */
#define MC_MASTER_RPC_MAX_REGEX_REPLY (32u << 20)

#endif
