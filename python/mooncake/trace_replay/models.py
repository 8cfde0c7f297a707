"""KV-cache size per token for model presets, and the block size the replay uses.

KV bytes per token = kv_factor x layers x kv_heads x head_dim x dtype_bytes, where
kv_factor is 2 (one key and one value vector per head) for ordinary attention and 1 for
DeepSeek's multi-head latent attention (MLA caches one compressed latent vector per token
and layer, not separate k and v). The FAST'25 traces use 512-token blocks, so one block
of KV cache is 512 x bytes-per-token bytes (upstream `FAST25-release/README.md`; the
upstream storage benchmark `benchmarks/storage_benchmark_v1` sizes blocks the same way).
"""
from dataclasses import dataclass

BLOCK_TOKENS = 512
"""Tokens per trace block (every FAST'25 hash id stands for a 512-token prefix block)."""

DEFAULT_BYTES_PER_TOKEN = 128
"""Scaled-down default: 64 KiB blocks. Real models give MiB-sized blocks (llama-3-8b:
64 MiB per block), too much for a small box to replay a whole trace; pick one with
--model when the machine has the memory."""


@dataclass(frozen=True)
class ModelPreset:
    """Shape of a model's KV cache (public model configs)."""
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    kv_factor: int = 2
    note: str = ""

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token (bytes), by the formula in the module docstring."""
        return self.kv_factor * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


PRESETS = {
    "llama-3-8b": ModelPreset(32, 8, 128, note="GQA, bf16"),
    "llama-3-70b": ModelPreset(80, 8, 128, note="GQA, bf16"),
    "llama-3.1-405b": ModelPreset(126, 8, 128, note="GQA, bf16"),
    "llama-2-7b": ModelPreset(32, 32, 128, note="MHA, fp16"),
    "llama-2-13b": ModelPreset(40, 40, 128, note="MHA, fp16"),
    "mistral-7b": ModelPreset(32, 8, 128, note="GQA, bf16"),
    "qwen2.5-0.5b": ModelPreset(24, 2, 64, note="GQA, bf16"),
    "qwen2.5-7b": ModelPreset(28, 4, 128, note="GQA, bf16"),
    "deepseek-v3": ModelPreset(61, 1, 576, kv_factor=1,
                               note="MLA: one 512+64 latent per token and layer, bf16"),
}


def presets_help() -> str:
    """A text table of the presets for --help (name, shape, bytes/token, block size)."""
    lines = ["model presets (KV bytes/token = kv_factor x layers x kv_heads x head_dim x "
             "dtype_bytes;", "block bytes = 512 x bytes/token):"]
    for name, p in PRESETS.items():
        lines.append(
            f"  {name:15s} {p.kv_factor} x {p.layers:3d} x {p.kv_heads:2d} x {p.head_dim:3d} x "
            f"{p.dtype_bytes} = {p.bytes_per_token:>7,d} B/token, block "
            f"{fmt_bytes(p.bytes_per_token * BLOCK_TOKENS)}  ({p.note})")
    lines.append(f"  default: {DEFAULT_BYTES_PER_TOKEN} B/token (block "
                 f"{fmt_bytes(DEFAULT_BYTES_PER_TOKEN * BLOCK_TOKENS)}), a scaled-down size "
                 "that lets a small box replay a whole trace")
    return "\n".join(lines)


def fmt_bytes(n: float) -> str:
    """Human-readable binary size: 65536 -> '64 KiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} TiB"


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """Parses '256MiB', '1gb', '64k', '4096' (binary units, as upstream's size strings)
    into bytes. Raises ValueError naming the text when it is not a size."""
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    if not num or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 4096, 64KiB, 256MiB, 1GiB)")
    value = float(num) * _UNITS[unit]
    if value < 0 or value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)
