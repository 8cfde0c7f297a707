/* oplog_internal.h: what oplog.c and snapshot.c share (src/master only). */
#ifndef MOONCAKE_MASTER_OPLOG_INTERNAL_H
#define MOONCAKE_MASTER_OPLOG_INTERNAL_H

#include <pthread.h>

#include "master/internal.h"
#include "master/persist.h"

#define OPLOG_PENDING_MAX (64u << 20) /* pending bytes before appenders wait for the writer */
#define OPLOG_KICK_BYTES (256u << 10) /* pending bytes that wake the writer at once        */
#define OPLOG_LINGER_NS 2000000ull    /* otherwise records nobody waits for are written    */
                                      /* at most this long after the first of the group    */

typedef struct mc__buf {
    uint8_t *p;
    size_t len, cap;
} mc__buf;

/* Makes room for n more bytes; returns where they go. */
uint8_t *mc__buf_room(mc__buf *b, size_t n);

typedef struct mc__oplog {
    mc_master_service *svc;
    char *dir;
    mc_master_log_sync sync;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the writer: frames pending, a rotation or stop asked */
    pthread_cond_t done; /* waiters: durable moved, or room in the buffer          */
    mc__buf pend, spare; /* frames appended, not yet handed to the kernel         */
    uint64_t last_lsn;   /* the last LSN given out                               */
    uint64_t durable;    /* the last LSN written in the mode `sync` promises     */
    uint64_t defer_max;  /* the highest LSN a deferred reply waits for (notify)  */
    bool stop, failed, rotate;
    bool kick;           /* a caller waits for a record: write the group now       */
    bool writer_idle;    /* the writer sleeps with nothing pending (signal it)     */
    uint64_t pend_since; /* monotonic ns of the group's first record               */
    int fd;              /* the current log file (writer thread only)            */
    pthread_t thr;
    struct mc__repl *repl; /* HA: groups written are handed to it (NULL: none)     */
    counter records, bytes, groups, fsyncs, write_errors, deferred;
} mc__oplog;

/* Encodes the record of o (caller holds its shard mutex and seg_lock for reading): PUT
 * for a complete object, START (with its writer) for a write in flight; appends its
 * frame with lsn 0 to b (the log seals the LSN in). Returns the payload bytes. */
size_t mc__log_encode_put_locked(mc_master_service *svc, obj *o, uint64_t now, uint64_t wall,
                                 mc__buf *b);
/* Appends s's MOUNT frame (lsn 0) to b. */
void mc__log_encode_mount(const seg *s, mc__buf *b, uint64_t lsn);

/* mc__oplog_open: a log in dir starting at first_lsn (a new file oplog-<first>.log),
 * its writer thread running; dir NULL: no file (HA replication only, the groups go to
 * the ring set with mc__oplog_set_repl). NULL with err on an I/O error. */
mc__oplog *mc__oplog_open(mc_master_service *svc, const char *dir, uint64_t first_lsn,
                          mc_master_log_sync sync, char *err, size_t errlen);
/* Asks for a rotation (the next group starts a new file) and returns the last LSN given
 * out: every record at or below it is in the current file or before. */
uint64_t mc__oplog_rotate(mc__oplog *l);
/* HA (replicate.c): every group written from now on is handed to r, and a waited
 * put_end then waits for a standby too (--ha_sync=sync). Before the log is used. */
void mc__oplog_set_repl(mc__oplog *l, struct mc__repl *r);
/* Flushes, fsyncs and closes; joins the writer. */
void mc__oplog_close(mc__oplog *l);

/* inflight.c, called by mc_master_log_apply (one applying thread): a `start` record
 * (a write in flight on the leader) is remembered; a `put` record of its key with its
 * replicas forgets it (mc__inflight_destroy, internal.h, frees the table). */
void mc__inflight_start(mc_master_service *svc, const Mclog__LogObject *lo);
void mc__inflight_end(mc_master_service *svc, const Mclog__LogObject *lo);
/* A task (end false) or task_end (true) record: the leader's copy / move tasks, which
 * mc_master_log_promote adopts (persist.h). */
void mc__inflight_task(mc_master_service *svc, const Mclog__LogTask *lt, bool end);

/* "<dir>/<prefix><20-digit lsn><suffix>" (malloc'd). */
char *mc__persist_path(const char *dir, const char *prefix, uint64_t lsn, const char *suffix);
/* fsyncs a directory (after a rename or create in it). */
int mc__fsync_dir(const char *dir);

#endif
