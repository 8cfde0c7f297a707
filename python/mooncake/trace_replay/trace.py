"""FAST'25 request traces: loading, and a built-in synthetic generator of the same shape.

Format (upstream `FAST25-release/README.md`): JSON Lines, one request per line with
`timestamp` (int ms from the start), `input_length` and `output_length` (tokens) and
`hash_ids` (one id per 512-token prefix block, len == ceil(input_length / 512)). Equal
ids are the same prefix block; a shared id at position i means the whole prefix up to i
is shared. The last block may be partial.
"""
import heapq
import json
import math
import random
from dataclasses import dataclass, field

from .models import BLOCK_TOKENS


class TraceError(ValueError):
    """A trace line that is not a valid FAST'25 request (message names the line)."""


@dataclass(slots=True)
class Request:
    """One trace request: arrival (ms), token counts and prefix-block hash ids."""
    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: list = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"timestamp": self.timestamp_ms, "input_length": self.input_length,
                           "output_length": self.output_length, "hash_ids": self.hash_ids})


def _int(obj, key, lineno, path):
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TraceError(f"{path}:{lineno}: {key!r} must be a non-negative integer, got {v!r}")
    return v


def load_trace(path: str, max_requests: int | None = None) -> list:
    """Reads up to max_requests requests (all when None) from a FAST'25 JSONL file.

    Blank lines are skipped. Raises TraceError (file:line and the field) on a malformed
    line, OSError when the file cannot be read."""
    out = []
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if max_requests is not None and len(out) >= max_requests:
                break
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{path}:{lineno}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}:{lineno}: not a JSON object")
            ids = obj.get("hash_ids")
            if not isinstance(ids, list) or not all(
                    isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**63
                    for h in ids):
                raise TraceError(f"{path}:{lineno}: 'hash_ids' must be a list of "
                                 "non-negative integers below 2**63")
            out.append(Request(_int(obj, "timestamp", lineno, path),
                               _int(obj, "input_length", lineno, path),
                               _int(obj, "output_length", lineno, path), ids))
    return out


def count_lines(path: str) -> int:
    """Number of non-blank lines (requests) in a trace file."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def write_trace(path: str, requests) -> None:
    """Writes requests as FAST'25 JSONL."""
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            f.write(r.to_json() + "\n")


def _lognormal(rng, mean, sigma, lo, hi):
    mu = math.log(mean) - sigma * sigma / 2
    return int(min(hi, max(lo, rng.lognormvariate(mu, sigma))))


def synthetic_trace(n_requests: int, seed: int = 0, arrival_rate_per_s: float = 2.0,
                    n_system_prompts: int = 8, mean_turns: float = 3.5,
                    mean_think_s: float = 45.0, max_input_tokens: int = 131072) -> list:
    """A synthetic trace with the conversation trace's shape (clearly not real data).

    - Prefix sharing: every conversation starts with one of n_system_prompts shared system
      prompts (1-6 full blocks), chosen with Zipf-like popularity, so a few prefixes are
      very hot.
    - Multi-turn growth: a conversation has a geometric number of turns (mean mean_turns,
      at most 16); turn t+1's input is turn t's input + its output + a new user message,
      so it reuses turn t's full input blocks and adds new ones (the partial last block
      and the output get new ids, as in the real trace).
    - Arrivals: new conversations are a Poisson process (arrival_rate_per_s); turns
      follow after an exponential think time (mean mean_think_s) plus generation time.
    Hash ids are handed out as blocks are created (the system prompts' first).
    Deterministic for a given seed. Returns n_requests Requests sorted by timestamp.
    """
    if n_requests < 0:
        raise ValueError("n_requests must be >= 0")
    rng = random.Random(seed)
    next_id = 0
    prompts = []
    for _ in range(n_system_prompts):
        n = rng.randint(1, 6)
        prompts.append(list(range(next_id, next_id + n)))
        next_id += n
    weights = [1.0 / (i + 1) ** 1.2 for i in range(n_system_prompts)]
    out = []
    events = []            # heap of (time_s, seq, conversation state)
    seq = 0
    next_arrival = 0.0
    while len(out) < n_requests:
        if events and events[0][0] <= next_arrival:
            t, _, conv = heapq.heappop(events)
        else:
            t = next_arrival
            next_arrival += rng.expovariate(arrival_rate_per_s)
            sp = rng.choices(prompts, weights)[0]
            turns = 1
            while rng.random() > 1.0 / mean_turns and turns < 16:
                turns += 1
            conv = {"ids": list(sp), "hashed": len(sp) * BLOCK_TOKENS,
                    "context": len(sp) * BLOCK_TOKENS, "turns_left": turns, "first": True}
        # this turn's input: previous context (input + output) + a new user message
        user = _lognormal(rng, 6000 if conv["first"] else 900, 1.0, 16, 60000)
        tokens = min(conv["context"] + user, max_input_tokens)
        n_blocks = math.ceil(tokens / BLOCK_TOKENS)
        # reusable: the full blocks of the previous input (its partial last block and the
        # previous output were never hashed as full blocks)
        full = min(conv["hashed"] // BLOCK_TOKENS, n_blocks)
        ids = conv["ids"][:full]
        ids.extend(range(next_id, next_id + n_blocks - full))
        next_id += n_blocks - full
        output = _lognormal(rng, 350, 0.8, 1, 4000)
        out.append(Request(int(t * 1000), tokens, output, ids))
        conv["ids"] = ids
        conv["hashed"] = tokens
        conv["context"] = tokens + output
        conv["turns_left"] -= 1
        conv["first"] = False
        if conv["turns_left"] > 0 and conv["context"] < max_input_tokens:
            gen_s = output / 40.0          # ~40 tokens/s decode
            heapq.heappush(events, (t + gen_s + rng.expovariate(1.0 / mean_think_s), seq,
                                    conv))
            seq += 1
    return out
