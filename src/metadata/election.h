/* metadata/election.h: leader election of HA masters, and the leader's view for clients.
 *
 * Upstream (upstream-mooncake.md §4.8): with --enable_ha the masters of one cluster elect
 * a leader through etcd; the leader publishes a MasterView (its address + a view version)
 * under the etcd key `mooncake-store/<cluster_id>/master_view` (value: "host:port"),
 * written under an etcd lease; clients given master_server_addr="etcd://h:p;h:p" read the
 * key to find the leader. We keep that key and value (so other readers of it, e.g. a
 * router that follows the leader, work unchanged) and take the key's etcd create_revision
 * as the view version: etcd revisions only grow, so every election gives a larger view.
 *
 * Protocol, over etcd's v3 JSON gateway (the calls of backend_etcd.c):
 *   campaign: range the key; present -> another master leads (its view is returned);
 *     absent -> lease/grant(TTL), then one txn "create_revision(key) == 0 ? put(key,
 *     self, lease) : range(key)": exactly one candidate wins.
 *   renew (the leader, every TTL/3): lease/keepalive, then range the key to check it is
 *     still ours (same create_revision and lease): an operator's delete, or a lease etcd
 *     expired while we were stopped, ends the leadership (MC_LEASE_EXPIRED).
 *   resign: lease/revoke (the key goes with it), so a standby takes over at once.
 * Fencing by time: every successful grant/keepalive moves serve_until_ms to
 *   t_sent + TTL - margin, margin = mc_election_margin_ms(TTL),
 * where t_sent is our monotonic clock before the request left. etcd counts the TTL from
 * when it received the request (later than t_sent), and a standby can only win after etcd
 * deleted the key at the lease's end; so the leader stops serving at least `margin`
 * before any other master can be elected, as long as the two clocks' rates differ by
 * less than margin / TTL (25%). The caller (master/ha.c) checks serve_until_ms on every
 * request, so a leader that was stopped (SIGSTOP, a long pause) refuses the requests it
 * finds on resuming, before its own renew thread has even run.
 *
 * Redis (a "redis://[[user]:password@]h[:p][/db]" string; builds with hiredis): the
 * view is upstream's hash `mooncake-store/{<cluster_id>}/master_view` (field
 * leader_address = "host:port"; ours: view_version, token = a random id of the term) with
 * a PX expiry of the TTL: a Lua script creates it only when absent (the SET NX PX of a
 * hash), another renews the expiry only while the token is ours (PEXPIRE), a third
 * deletes it on resign. The view version is the counter `mooncake-store/{<cluster_id>}/
 * view_version` moved to max(counter + 1, the server's clock in ms) at each election, so
 * a Redis that lost its data on a restart still hands out larger views. The same
 * fencing by time holds (Redis counts the expiry from when it ran the script). One Redis
 * server is a single point of failure for the election (no quorum): etcd is the
 * recommended backend.
 * Other strings: MC_NOT_SUPPORTED (k8s is refused by the master with a message).
 * Threads: an mc_election is used by one thread at a time (the master's HA thread, or
 * one client's leader lookup under its lock).
 */
#ifndef MC_METADATA_ELECTION_H
#define MC_METADATA_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_ELECTION_ADDR_MAX 256 /* bytes of a leader address, with the NUL */
#define MC_ELECTION_TOKEN_MAX 64 /* bytes of a term token buffer, with the NUL */
#define MC_ELECTION_CLUSTER_MAX 128
#define MC_ELECTION_MIN_TTL_S 1
#define MC_ELECTION_MAX_TTL_S 3600

typedef struct mc_election mc_election;

typedef struct mc_election_view {
    char leader[MC_ELECTION_ADDR_MAX]; /* "host:port" of the leader's RPC */
    int64_t version;                   /* the key's etcd create_revision, > 0 */
} mc_election_view;

/* mc_election_cluster_id_ok: upstream's rule for --cluster_id: [0-9A-Za-z_.-]{1,128};
 * also not "." nor ".." (mooncake-c: it names the directory <root_fs_dir>/<cluster_id>). */
bool mc_election_cluster_id_ok(const char *cluster_id);

/* mc_election_margin_ms: the fencing margin for a lease of ttl_s seconds:
 * max(ttl_s * 1000 / 4, 250) ms (see the file comment). */
uint32_t mc_election_margin_ms(uint32_t ttl_s);

/* mc_election_create: an election client.
 *   conn: a Redis URL (above), or etcd endpoints: "h:p;h:p", "h:p,h:p", "etcd://h:p;..."
 *     (mc_metadata_parse_conn; borrowed); members may be written "http://h:p" as
 *     upstream's lists do. cluster_id: mc_election_cluster_id_ok (borrowed). ttl_s: the
 *     lease, MIN..MAX_TTL_S (clients that only read views pass any valid value).
 *   Each etcd request times out after max(ttl_s * 1000 / 3, 200) ms so a hung member
 *   cannot hold the renew past the lease. No network traffic here.
 * Returns MC_OK with *out (free with mc_election_destroy); MC_INVALID_PARAMS (bad string,
 * cluster id or TTL; logged); MC_NOT_SUPPORTED (neither etcd nor Redis, or Redis in a
 * build without hiredis; logged). */
int mc_election_create(const char *conn, const char *cluster_id, uint32_t ttl_s,
                       mc_election **out);

/* mc_election_destroy: revokes a lease still held (best effort), frees. NULL: no-op. */
void mc_election_destroy(mc_election *e);

/* mc_election_key: the view key "mooncake-store/<cluster_id>/master_view" (borrowed,
 * lives as e). */
const char *mc_election_key(const mc_election *e);

/* mc_election_campaign: one attempt to become the leader, publishing self ("host:port",
 * borrowed, < MC_ELECTION_ADDR_MAX bytes).
 * Returns MC_OK: we lead; *view = our view, *serve_until_ms set (monotonic ms).
 *   MC_OBJECT_ALREADY_EXISTS: another master leads; *view = its view (our key, e.g. left
 *   by a previous run of ours under a lease not yet expired, counts as another's).
 *   MC_RPC_FAIL / MC_RPC_TIMEOUT / MC_INVALID_PARAMS: etcd did not answer or refused. */
int mc_election_campaign(mc_election *e, const char *self, mc_election_view *view,
                         uint64_t *serve_until_ms);

/* mc_election_renew: the leader's keepalive + ownership check (after a campaign MC_OK).
 * Returns MC_OK (*serve_until_ms moved on); MC_LEASE_EXPIRED (the lease or the key is
 * gone or another's: we no longer lead; the lease is dropped); a transport code (etcd
 * not reachable: keep trying until serve_until_ms passes). */
int mc_election_renew(mc_election *e, uint64_t *serve_until_ms);

/* mc_election_resign: revokes our lease (the key goes with it). MC_OK or a transport
 * code; the lease is forgotten either way. */
int mc_election_resign(mc_election *e);

/* mc_election_read_view: the current leader. MC_OK with *view; MC_OBJECT_NOT_FOUND (no
 * leader now: between two leases); a transport code. */
int mc_election_read_view(mc_election *e, mc_election_view *view);

/* ---- following the leader (clients; docs/ha.md "How clients follow the leader") ---- */

/* mc_election_view_fn: a watch's report. view: a new leader's view (borrowed for the
 * call), or NULL once when the watch is established (events flow from then on). */
typedef void (*mc_election_view_fn)(void *ctx, const mc_election_view *view);

/* mc_election_watchable: true for etcd (a v3 watch); Redis is followed by polling
 * mc_election_read_view (the election publishes nothing). */
bool mc_election_watchable(const mc_election *e);

/* mc_election_watch: follows the view key through etcd's v3 watch (the gateway's
 * streaming POST /v3/watch on one endpoint, the next one after a failure; each message a
 * WatchResponse). Blocks until max_ms (ms) passed, the stream broke, or
 * mc_election_watch_stop. fn(ctx, view) runs on this thread for every put of the key
 * (a new leader; a delete, i.e. no leader between two leases, is not reported).
 *   *from_rev: in, the etcd revision to start from (0: from now); out, the revision to
 *   resume from (the last event's mod_revision + 1), 0 after a compaction (the caller
 *   reads the view and starts from now).
 * Returns MC_OK (max_ms passed, or stopped), MC_RPC_FAIL / MC_RPC_TIMEOUT (the stream
 * broke or no endpoint answered: read the view, then watch again), MC_NOT_SUPPORTED
 * (Redis). Threads: one thread watches; it must not use e for anything else meanwhile
 * (give the watch its own mc_election). */
int mc_election_watch(mc_election *e, int64_t *from_rev, uint32_t max_ms,
                      mc_election_view_fn fn, void *ctx);

/* mc_election_watch_stop: makes the running mc_election_watch return at once, and every
 * later one return MC_OK without watching. Any thread; e stays valid. */
void mc_election_watch_stop(mc_election *e);

/* Who may fetch the leader's log (master/replicate.c, docs/ha.md "Who may fetch"): at
 * each election the winner draws a random term token (32 hex digits) and publishes it
 * with its lease: etcd: the key `mooncake-store/<cluster_id>/repl_token`, put in the
 * campaign's txn with the view (so its create_revision is the view version); Redis: the
 * view hash's `token` field. Readers of the election backend (the standbys) learn it;
 * a peer that only reaches the RPC port does not.
 * mc_election_term_token: our token while we lead ("" otherwise; borrowed, lives until
 * the next campaign). */
const char *mc_election_term_token(const mc_election *e);

/* mc_election_read_token: the token of the leader of view `version` into out (cap >= 33
 * bytes). MC_OK; MC_OBJECT_NOT_FOUND (no token of that view: the leader changed, or
 * none is published); a transport code. */
int mc_election_read_token(mc_election *e, int64_t version, char *out, size_t cap);

#endif
