/* oplog_codec.h: the frames of the master's mutation log and snapshot files
 * (proto/master_log.proto; docs/ha.md "Mutation log and snapshots").
 *
 * A file is an 8-byte magic ("MCLOG001" for a log, "MCSNAP01" for a snapshot) and then
 * frames; a frame is a 16-byte header and a payload:
 *     u32 LE payload length (1 .. MC_MASTER_LOG_FRAME_MAX)
 *     u32 LE checksum: XXH32 over the lsn and payload bytes, seed MC_MASTER_LOG_SEED
 *     u64 LE lsn (log: the record's sequence number, +1 per record; snapshot: the
 *         header frame carries the snapshot's LSN, the others 0)
 *     payload: one protobuf-encoded mclog.LogRecord
 * The same frames are the replication stream a standby master applies
 * (mc_master_log_apply in master/persist.h): a standby parses what it receives with
 * mc_master_log_parse and applies each record in order.
 *
 * No upstream counterpart: upstream's snapshots are a serialised fork of the index and
 * its op log entries travel through etcd (upstream-mooncake.md §4.8); this format is
 * ours. Threads: every function here is pure (no shared state). */
#ifndef MOONCAKE_MASTER_OPLOG_CODEC_H
#define MOONCAKE_MASTER_OPLOG_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "master_log.pb-c.h"

#define MC_MASTER_LOG_MAGIC "MCLOG001"
#define MC_MASTER_SNAP_MAGIC "MCSNAP01"
#define MC_MASTER_LOG_MAGIC_LEN 8u
#define MC_MASTER_LOG_HDR 16u                    /* bytes of a frame header            */
#define MC_MASTER_LOG_FRAME_MAX (1u << 20)       /* payload bytes of one frame, at most */
#define MC_MASTER_LOG_SEED 0x4d434c47u           /* "MCLG"                              */

/* Why a parse stopped (mc_master_log_parse's return). */
typedef enum mc_master_log_stop {
    MC_MASTER_LOG_END = 0,     /* every byte was a whole valid frame                       */
    MC_MASTER_LOG_TORN = 1,    /* the bytes end inside a frame (a write cut short)         */
    MC_MASTER_LOG_CORRUPT = 2, /* a frame's length, checksum or protobuf is wrong          */
    MC_MASTER_LOG_STOPPED = 3, /* the callback returned non-zero                           */
} mc_master_log_stop;

/* Called once per valid frame, in order: lsn from the header, rec decoded (borrowed for
 * the call; freed after it returns). Return 0 to go on, non-zero to stop. */
typedef int (*mc_master_log_frame_cb)(void *ctx, uint64_t lsn, const Mclog__LogRecord *rec);

/* mc_master_log_parse: walks the frames of buf[0..len) (no magic: the caller skips it),
 * calling cb (may be NULL: validation only) for each valid one. *good = bytes of the
 * frames that were valid and handed to cb (the offset to truncate a torn or corrupt file
 * at). *frames (may be NULL) = how many. Returns why it stopped. Allocates only inside
 * protobuf-c's decoder (freed per frame). */
mc_master_log_stop mc_master_log_parse(const uint8_t *buf, size_t len, mc_master_log_frame_cb cb,
                                       void *ctx, size_t *good, uint64_t *frames);

/* mc_master_log_parse_after: the same, but frames whose lsn is at or below after are
 * only checked (length, checksum), not decoded nor handed to cb: a replay that starts
 * after a snapshot skips what the snapshot holds at the cost of a checksum. */
mc_master_log_stop mc_master_log_parse_after(const uint8_t *buf, size_t len, uint64_t after,
                                             mc_master_log_frame_cb cb, void *ctx,
                                             size_t *good, uint64_t *frames);

/* mc__log_frame_size: bytes the frame of rec takes (header + payload). */
size_t mc__log_frame_size(const Mclog__LogRecord *rec);

/* mc__log_frame_write: writes rec's frame with lsn at out (mc__log_frame_size bytes
 * available). Returns the bytes written. */
size_t mc__log_frame_write(uint8_t *out, uint64_t lsn, const Mclog__LogRecord *rec);

/* mc__log_frame_seal: fills the header of a frame whose payload (plen bytes) is already
 * at out + MC_MASTER_LOG_HDR. */
void mc__log_frame_seal(uint8_t *out, uint64_t lsn, size_t plen);

#endif
