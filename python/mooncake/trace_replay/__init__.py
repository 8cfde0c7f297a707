"""mooncake.trace_replay: replay FAST'25 KV-cache traces through a store (the main job).

`mooncake_trace_replay` (or `python -m mooncake.trace_replay`) reads a FAST'25 JSONL trace
(or generates a synthetic one of the same shape), and for every request looks up its
512-token prefix blocks (batch exist), reads the cached prefix into registered memory and
verifies every byte, and writes the missing blocks. It reports block and token hit rates
next to an infinite cache and an exact LRU of the same capacity, throughput, latency,
evictions, errors, corrupt blocks and peak RSS, as a table, JSON and a PNG.

Modules: cli (options, orchestration), trace (load / synthesize), models (bytes per
token), blocks (deterministic contents), sim (ideal and LRU references), backends
(store, redis), cluster (child processes), node (a store node), replay (the loop),
report (table, JSON, PNG).
"""
