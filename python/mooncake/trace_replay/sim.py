"""Hit-rate references computed on the same request sequence as the replay.

Prefix semantics (the same as the replay): a request's hit is the longest run of cached
blocks from the start of its hash_ids. After the lookup, the hit blocks are read (an
access) and the blocks that were absent are written (an insert); blocks present beyond
the prefix are neither read nor written, exactly as the replay does.

- ideal: an infinite cache (every block ever written stays).
- LRU: an exact least-recently-used cache holding `capacity` blocks; reads refresh a
  block in request order, inserts evict the least recently used block when full.
"""
from collections import OrderedDict
from dataclasses import dataclass

from .models import BLOCK_TOKENS


@dataclass
class SimResult:
    """Totals of a simulation. Rates are 0.0 when there is nothing to count."""
    blocks: int = 0
    block_hits: int = 0
    tokens: int = 0
    token_hits: int = 0
    evictions: int = 0
    capacity_blocks: int | None = None      # None = infinite

    @property
    def block_hit_rate(self) -> float:
        return self.block_hits / self.blocks if self.blocks else 0.0

    @property
    def token_hit_rate(self) -> float:
        return self.token_hits / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict:
        return {"blocks": self.blocks, "block_hits": self.block_hits,
                "block_hit_rate": self.block_hit_rate, "tokens": self.tokens,
                "token_hits": self.token_hits, "token_hit_rate": self.token_hit_rate,
                "evictions": self.evictions, "capacity_blocks": self.capacity_blocks}


def hit_tokens(input_length: int, n_blocks: int, hit_blocks: int) -> int:
    """Tokens covered by a prefix hit of hit_blocks out of n_blocks (the last block of a
    request may be partial: a full hit covers input_length tokens)."""
    if n_blocks and hit_blocks >= n_blocks:
        return input_length
    return min(hit_blocks * BLOCK_TOKENS, input_length)


def simulate_ideal(requests, per_request: list | None = None) -> SimResult:
    """Hit rates with an infinite cache. per_request, when given, gets each request's
    hit blocks appended."""
    seen = set()
    res = SimResult()
    for r in requests:
        ids = r.hash_ids
        k = 0
        for h in ids:
            if h not in seen:
                break
            k += 1
        seen.update(ids)
        if per_request is not None:
            per_request.append(k)
        res.blocks += len(ids)
        res.block_hits += k
        res.tokens += r.input_length
        res.token_hits += hit_tokens(r.input_length, len(ids), k)
    return res


def simulate_lru(requests, capacity_blocks: int, per_request: list | None = None) -> SimResult:
    """Hit rates of an exact LRU cache of capacity_blocks blocks (>= 0). per_request,
    when given, gets each request's hit blocks appended."""
    if capacity_blocks < 0:
        raise ValueError("capacity_blocks must be >= 0")
    cache = OrderedDict()
    res = SimResult(capacity_blocks=capacity_blocks)
    move = cache.move_to_end
    for r in requests:
        ids = r.hash_ids
        present = [h in cache for h in ids]
        k = 0
        for p in present:
            if not p:
                break
            k += 1
        for h in ids[:k]:
            move(h)
        for h, p in zip(ids[k:], present[k:]):
            if p:
                continue
            if capacity_blocks == 0:
                continue
            cache[h] = None
            move(h)
            if len(cache) > capacity_blocks:
                cache.popitem(last=False)
                res.evictions += 1
        if per_request is not None:
            per_request.append(k)
        res.blocks += len(ids)
        res.block_hits += k
        res.tokens += r.input_length
        res.token_hits += hit_tokens(r.input_length, len(ids), k)
    return res
