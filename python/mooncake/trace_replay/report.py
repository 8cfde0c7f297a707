"""What a replay shows: the final table, the JSON file, the PNG."""
import json
import math
import os
import textwrap

import numpy as np

from .models import fmt_bytes


def _pct(a, q):
    return float(np.percentile(a, q)) if len(a) else 0.0


def timeseries(stats, wall_s: float, ref_hits: dict | None = None) -> dict:
    """Per-bin figures over the run (about 60 bins, at least 0.25 s each): completion
    time (s, bin end), requests/s, block hit rate in the bin and cumulative, MB/s moved.
    ref_hits: {name: {request index: hit blocks}} of the references (ideal, LRU); their
    cumulative hit rates over the same completions come out as cum_<name>_hit_rate."""
    t = np.asarray(stats.t_done, dtype=float)
    ref_hits = ref_hits or {}
    if not len(t):
        out = {"bin_s": 0, "t_s": [], "qps": [], "hit_rate": [], "cum_hit_rate": [],
               "mb_per_s": []}
        out.update({f"cum_{k}_hit_rate": [] for k in ref_hits})
        return out
    order = np.argsort(t)
    t = t[order]
    blocks = np.asarray(stats.req_blocks, dtype=float)[order]
    hits = np.asarray(stats.req_hits, dtype=float)[order]
    nbytes = np.asarray(stats.req_bytes, dtype=float)[order]
    span = max(wall_s, float(t[-1]), 1e-6)
    bin_s = max(0.25, span / 60)
    nb = max(1, math.ceil(span / bin_s))
    idx = np.minimum((t / bin_s).astype(int), nb - 1)
    cnt = np.bincount(idx, minlength=nb)
    bsum = np.bincount(idx, weights=blocks, minlength=nb)
    hsum = np.bincount(idx, weights=hits, minlength=nb)
    ysum = np.bincount(idx, weights=nbytes, minlength=nb)
    cb, ch = np.cumsum(bsum), np.cumsum(hsum)
    with np.errstate(invalid="ignore", divide="ignore"):
        hr = np.where(bsum > 0, hsum / bsum, np.nan)
        chr_ = np.where(cb > 0, ch / cb, np.nan)
    def clean(a):
        return [None if (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)
                for x in a]
    width = np.full(nb, bin_s)
    width[-1] = max(span - (nb - 1) * bin_s, 1e-3)      # the last bin may be partial
    out = {"bin_s": bin_s,
           "t_s": [round(min((i + 1) * bin_s, span), 3) for i in range(nb)],
           "qps": clean(cnt / width), "hit_rate": clean(hr), "cum_hit_rate": clean(chr_),
           "mb_per_s": clean(ysum / width / 1e6)}
    index = np.asarray(stats.req_index)[order]
    for name, hits_by_index in ref_hits.items():
        rh = np.asarray([hits_by_index.get(int(i), 0) for i in index], dtype=float)
        crh = np.cumsum(np.bincount(idx, weights=rh, minlength=nb))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"cum_{name}_hit_rate"] = clean(np.where(cb > 0, crh / cb, np.nan))
    return out


def summarize(stats, wall_s: float) -> dict:
    """The measured figures of a run (see the JSON's 'results')."""
    lat_ms = np.asarray(stats.latency, dtype=float) * 1000
    moved = stats.blocks_read + stats.blocks_written
    w = max(wall_s, 1e-9)
    return {
        "requests": stats.requests, "wall_s": wall_s, "qps": stats.requests / w,
        "blocks": stats.blocks, "block_hits": stats.block_hits,
        "block_hit_rate": stats.block_hits / stats.blocks if stats.blocks else 0.0,
        "tokens": stats.tokens, "token_hits": stats.token_hits,
        "token_hit_rate": stats.token_hits / stats.tokens if stats.tokens else 0.0,
        "blocks_read": stats.blocks_read, "bytes_read": stats.bytes_read,
        "read_gb_per_s": stats.bytes_read / w / 1e9,
        "blocks_written": stats.blocks_written, "bytes_written": stats.bytes_written,
        "write_gb_per_s": stats.bytes_written / w / 1e9,
        "blocks_moved_per_s": moved / w,
        "latency_ms": {"p50": _pct(lat_ms, 50), "p95": _pct(lat_ms, 95),
                       "p99": _pct(lat_ms, 99), "mean": float(lat_ms.mean()) if len(lat_ms)
                       else 0.0, "max": float(lat_ms.max()) if len(lat_ms) else 0.0},
        "errors": stats.error_total, "errors_by_kind": dict(stats.errors),
        "corrupt_blocks": stats.corrupt, "late_misses": stats.late_misses,
        "lease_retries": stats.lease_retries,
        "evictions_observed": stats.evicted_observed,
    }


def _pc(x):
    return "n/a" if x is None else f"{100 * x:6.2f} %"


def _pool_text(m: dict) -> str:
    return fmt_bytes(m["pool_bytes"]) if m.get("pool_bytes") else "UNKNOWN"


def table(doc: dict) -> str:
    """The final table as text. reference["lru"] is None when the pool's size is unknown
    (an existing cluster whose capacity could not be read): LRU figures show n/a."""
    m, r, ref = doc["meta"], doc["results"], doc["reference"]
    lru = ref.get("lru") or {}
    tr = m["trace"]
    title = "SYNTHETIC trace (built-in generator, seed %d)" % tr["seed"] if tr["synthetic"] \
        else f"trace {tr['path']}"
    lines = []
    lines.append("=" * 78)
    lines.append(f"mooncake_trace_replay  backend={m['backend']}  "
                 f"{'INTERRUPTED  ' if m['interrupted'] else ''}{title}")
    lines.append(f"  {r['requests']} of {tr['requests_in_trace']} requests; block "
                 f"{fmt_bytes(m['block_bytes'])} ({m['bytes_per_token']} B/token x 512, "
                 f"{m['model'] or 'no model preset'})")
    if lru:
        lines.append(f"  pool {fmt_bytes(m['pool_bytes'])} = {lru['capacity_blocks']} "
                     f"blocks ({m.get('cluster', '?')})")
    else:
        lines.append(f"  pool UNKNOWN ({m.get('cluster', '?')})")
        lines.extend(textwrap.wrap(f"({m.get('pool_source', 'the pool size is unknown')})",
                                   76, initial_indent="    ", subsequent_indent="     "))
    lines.append(f"  concurrency {m['concurrency']}, time-scale {m['time_scale']}, "
                 f"key prefix {m['key_prefix']!r}")
    lines.append("-" * 78)
    row = lambda k, v: lines.append(f"  {k:<24s}{v}")
    row("requests", f"{r['requests']} in {r['wall_s']:.2f} s = {r['qps']:.1f} QPS")
    row("block hit rate", f"{_pc(r['block_hit_rate'])}   ideal {_pc(ref['ideal']['block_hit_rate'])}"
        f"   LRU {_pc(lru.get('block_hit_rate'))}")
    row("token hit rate", f"{_pc(r['token_hit_rate'])}   ideal {_pc(ref['ideal']['token_hit_rate'])}"
        f"   LRU {_pc(lru.get('token_hit_rate'))}")
    if ref.get("lru_at_mean_occupancy"):
        e = ref["lru_at_mean_occupancy"]
        row("", f"(LRU at {e['capacity_blocks']} blocks, what the store held on average "
            f"while evicting: {_pc(e['block_hit_rate']).strip()})")
    elif ref.get("lru_at_keys_held"):
        e = ref["lru_at_keys_held"]
        row("", f"(LRU with the {e['capacity_blocks']} blocks the backend held at the end: "
            f"{_pc(e['block_hit_rate']).strip()})")
    t = r.get("tiers")
    if t:
        row("hits by tier", f"memory {t['memory_hits']} ({_pc(t['memory_hit_rate']).strip()})"
            f", disk {t['disk_hits']} ({_pc(t['disk_hit_rate']).strip()}), misses "
            f"{t['misses']}")
        row("", f"offloads {t['offload_successes']} ({t['offload_failures']} refused), "
            f"{t['disk_only_keys']} blocks on disk only at the end")
    if ref.get("lru_memory_disk"):
        row("", f"(LRU of memory + disk, {ref['lru_memory_disk']['capacity_blocks']} blocks: "
            f"{_pc(ref['lru_memory_disk']['block_hit_rate']).strip()})")
    row("read", f"{r['blocks_read']} blocks, {r['bytes_read'] / 1e9:.3f} GB, "
        f"{r['read_gb_per_s']:.3f} GB/s")
    row("written", f"{r['blocks_written']} blocks, {r['bytes_written'] / 1e9:.3f} GB, "
        f"{r['write_gb_per_s']:.3f} GB/s")
    row("blocks moved/s", f"{r['blocks_moved_per_s']:.0f}")
    lat = r["latency_ms"]
    row("latency p50/p95/p99", f"{lat['p50']:.2f} / {lat['p95']:.2f} / {lat['p99']:.2f} ms "
        f"(max {lat['max']:.1f})")
    ev = r.get("evictions_backend")
    row("evictions", f"backend {'n/a' if ev is None else ev}, observed {r['evictions_observed']}"
        f", LRU model {lru.get('evictions', 'n/a')}")
    errs = ", ".join(f"{k} {v}" for k, v in sorted(r["errors_by_kind"].items()))
    row("errors", f"{r['errors']}" + (f"  ({errs})" if errs else ""))
    notes = [f"{k} {r.get(k.replace(' ', '_'), 0)}" for k in ("late misses", "lease retries")
             if r.get(k.replace(" ", "_"))]
    row("corrupt blocks", f"{r['corrupt_blocks']}" + (f"  ({', '.join(notes)})" if notes
                                                     else ""))
    rss = doc.get("peak_rss", {})
    parts = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in rss.get("by_process", {}).items())
    row("peak RSS", f"{fmt_bytes(rss.get('total', 0))}  ({parts})")
    lines.append("=" * 78)
    return "\n".join(lines)


def verdict(doc: dict) -> str:
    """A few lines: is the run correct, and how far is the hit rate from the exact LRU
    (at the pool's size, and at what the store held on average while evicting)."""
    r, ref = doc["results"], doc["reference"]
    hr = 100 * r["block_hit_rate"]
    lru = ref.get("lru")
    ok = not r["errors"] and not r["corrupt_blocks"]
    lines = [("RESULT: OK, every block read back was verified byte for byte and no call "
              "failed." if ok else
              f"RESULT: FAILED, {r['errors']} errors and {r['corrupt_blocks']} corrupt "
              "blocks (see 'errors' above and the JSON's errors_by_kind).")
             + ("  [INTERRUPTED: partial run]" if doc["meta"]["interrupted"] else "")]
    if lru:
        lines.append(f"  Block hit rate {hr:.2f} %; an exact LRU of the pool's "
                     f"{lru['capacity_blocks']} blocks hits {100 * lru['block_hit_rate']:.2f} % "
                     f"({hr - 100 * lru['block_hit_rate']:+.2f} points).")
    else:
        lines.append(f"  Block hit rate {hr:.2f} %; no LRU reference: the pool's size is "
                     "unknown (pass --metrics-url, or --nodes and --segment-size).")
    occ = ref.get("lru_at_mean_occupancy")
    if occ and doc["meta"]["backend"] != "redis":
        ms = doc["meta"].get("master_settings") or {}
        hw = ms.get("eviction_high_watermark_ratio")
        er = ms.get("eviction_ratio")
        if ms:
            how = (f"eviction starts at {100 * (0.90 if hw is None else hw):g} % full and "
                   f"frees {100 * (0.05 if er is None else er):g} % of the pool at a time"
                   + (", upstream's defaults" if hw is None and er is None else ""))
        else:
            how = "eviction starts at its high watermark, 90 % full by default"
        lines.append(textwrap.fill(
            f"The store keeps part of its pool free ({how}): it held "
            f"{occ['capacity_blocks']} blocks on average while evicting, where an exact LRU "
            f"hits {100 * occ['block_hit_rate']:.2f} % "
            f"({hr - 100 * occ['block_hit_rate']:+.2f} points).", 88,
            initial_indent="  ", subsequent_indent="  "))
    return "\n".join(lines)


LEGEND = """\
What the figures mean (one request = one prompt; its KV cache is cut into 512-token blocks):
  requests        trace requests replayed, and requests per second of wall time (QPS).
  block hit rate  share of the requests' blocks served from the store: per request, the
                  longest run of stored blocks from its start, read back and verified.
                  ideal = an infinite cache (the most any cache could hit on this trace);
                  LRU = an exact least-recently-used cache with as many blocks as the pool
                  holds. A store that evicts well comes close to LRU.
  token hit rate  the same in prompt tokens (a request's last block may be partial).
  read / written  blocks fetched (hits) and stored (misses that the store did not hold:
                  a block after the hit that exists is not written again), bytes, GB/s.
  blocks moved/s  (read + written) blocks per second: the figure bench/replay_compare ranks.
  latency         per request: exist check + get + byte check + put of the missing blocks.
  evictions       keys the store dropped to make room (its master's count), blocks this run
                  wrote and later found gone (observed), and the LRU model's count.
  errors          calls that returned an error code; corrupt blocks: bytes read back that
                  differ from what was written. Both must be 0. (A read refused with
                  LEASE_EXPIRED is retried once and counted as a lease retry.)
  peak RSS        largest resident memory of each process (the pool's shared memory counts
                  in the process that touched it)."""


def files_note(doc: dict, json_path: str, png_path: str | None, png_why: str | None,
               log_dir: str) -> str:
    """Where the output went (absolute paths)."""
    lines = [f"  {os.path.abspath(json_path)}   every figure above, per-second series, settings"]
    if png_why is None:
        lines.append(f"  {os.path.abspath(png_path)}   hit rate vs ideal/LRU and throughput "
                     "over time, latency CDF")
    else:
        lines.append(f"  (no PNG: {png_why})")
    lines.append(f"  {os.path.abspath(log_dir)}/   logs of the processes this run started")
    if doc["meta"]["trace"]["synthetic"]:
        trace = os.path.join(os.path.dirname(os.path.abspath(json_path)), "synthetic_trace.jsonl")
        lines.append(f"  {trace}   the synthetic trace (FAST'25 format)")
    return "Output files:\n" + "\n".join(lines)


def write_json(doc: dict, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def write_png(doc: dict, stats, path: str) -> str | None:
    """Hit rate and throughput over time, and the latency CDF. Returns None on success,
    else why no PNG was written (matplotlib missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    m, ts, ref = doc["meta"], doc["timeseries"], doc["reference"]
    tr = m["trace"]
    label = "SYNTHETIC trace" if tr["synthetic"] else os.path.basename(tr["path"])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    fig.suptitle(f"mooncake_trace_replay: {label}, backend {m['backend']}, "
                 f"{doc['results']['requests']} requests, block {fmt_bytes(m['block_bytes'])}, "
                 f"pool {_pool_text(m)}"
                 + ("  [INTERRUPTED]" if m["interrupted"] else ""), fontsize=11)
    t = np.asarray(ts["t_s"], dtype=float)
    nan = lambda a: np.asarray([np.nan if x is None else x for x in a], dtype=float)
    ax = axes[0]
    ax.plot(t, 100 * nan(ts["hit_rate"]), lw=1, alpha=0.5, label="measured (per bin)")
    ax.plot(t, 100 * nan(ts["cum_hit_rate"]), lw=2,
            label=f"measured (cum.) {100 * doc['results']['block_hit_rate']:.1f}%")
    if "cum_ideal_hit_rate" in ts:
        ax.plot(t, 100 * nan(ts["cum_ideal_hit_rate"]), color="green", ls="--",
                label=f"ideal, infinite cache (cum.) {100 * ref['ideal']['block_hit_rate']:.1f}%")
    if "cum_lru_hit_rate" in ts:
        ax.plot(t, 100 * nan(ts["cum_lru_hit_rate"]), color="red", ls=":", lw=2,
                label=f"exact LRU, same capacity (cum.) {100 * ref['lru']['block_hit_rate']:.1f}%")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title("block hit rate over time")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    ax = axes[1]
    ax.plot(t, nan(ts["qps"]), color="tab:blue", label="requests/s")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("requests/s", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(t, nan(ts["mb_per_s"]), color="tab:orange", label="MB/s read+written")
    ax2.set_ylabel("MB/s read + written", color="tab:orange")
    ax.set_title("throughput over time")
    ax.grid(alpha=0.3)
    ax = axes[2]
    lat = np.sort(np.asarray(stats.latency, dtype=float) * 1000)
    if len(lat):
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat) * 100)
        for q, c in ((50, "green"), (95, "orange"), (99, "red")):
            v = doc["results"]["latency_ms"][f"p{q}"]
            ax.axvline(v, color=c, ls=":", label=f"p{q} {v:.2f} ms")
        if lat[-1] > 20 * max(lat[0], 1e-3):
            ax.set_xscale("log")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel("request latency (ms)")
    ax.set_ylabel("requests (%)")
    ax.set_ylim(0, 100)
    ax.set_title("latency CDF (exist + get + verify + put)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
