#!/usr/bin/env bash
# Start, stop or query a local vLLM server (from .venv-vllm, see scripts/install_vllm.sh)
# serving SmolLM2-135M-Instruct on 127.0.0.1, on the CPU.
#
#   bash scripts/vllm_server.sh start  [--port 8000] [--dtype bfloat16] [--model DIR|NAME] [--timeout 300]
#                                      [--kv-cache-gib 1] [--block-size 32] [--compile] [--stock | --no-plugin]
#   bash scripts/vllm_server.sh stop   [--port 8000]
#   bash scripts/vllm_server.sh restart [--port 8000]   (stop, then start with the last start's options)
#   bash scripts/vllm_server.sh status [--port 8000]
#
# start materializes the model folder through the main venv (.venv; honours $PRESTO_SGL_CACHE)
# unless --model is a folder (a name such as gemma3 is materialized the same way), launches `python -m vllm.entrypoints.openai.api_server` in its own
# process group (log: .cache/vllm/server-PORT.log, PID file: .cache/vllm/server-PORT.pid) and
# waits until GET /health answers 200; on timeout or early exit it prints the log tail, stops
# the server and fails. --dtype float32 for exactness tests, bfloat16 (default) for speed.
# Eager mode unless --compile (compiling takes a minute or two more at start). The KV cache is
# --kv-cache-gib GiB in blocks of --block-size tokens (default 32, the CPU attention's smallest):
# vLLM's prefix cache reuses whole blocks only, so at vLLM's CPU default of 128 a 100-token prefix
# reuses nothing and a 300-token one 256 tokens; at 32, 96 and 288. The server loads presto-sgl's
# one-pass plugin (VLLM_PLUGINS=presto_onepass) and its structured outputs use xgrammar (vLLM's
# `auto` could fall back to another library per request);
# --stock loads no plugin and serves temperature-scaled logprobs (--logprobs-mode
# processed_logprobs), which the engine's two-pass mode needs; --no-plugin loads no plugin and
# changes nothing else (the plugin's server without it, as benchmarks/guest_cost.py compares). All cores run the model
# (VLLM_CPU_OMP_THREADS_BIND=0-(n-1), none reserved). Extra arguments after `--` go to vLLM.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
say() { echo "vllm_server: $*"; }
die() { echo "vllm_server: ERROR: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
CMD="$1"; shift
START_ARGS=("$@")
PORT=8000
DTYPE=bfloat16
MODEL=""
TIMEOUT=300
KV_GIB=1
BLOCK=32
COMPILE=no
STOCK=no
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --kv-cache-gib) KV_GIB="$2"; shift 2 ;;
    --block-size) BLOCK="$2"; shift 2 ;;
    --compile) COMPILE=yes; shift ;;
    --stock) STOCK=yes; shift ;;
    --no-plugin) STOCK=plain; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage ;;
    *) die "unknown option: $1" ;;
  esac
done
case "$PORT" in ''|*[!0-9]*) die "--port needs a number, not '$PORT'" ;; esac
case "$KV_GIB" in ''|*[!0-9]*|0) die "--kv-cache-gib needs a whole number of GiB >= 1, not '$KV_GIB'" ;; esac
BAD_BLOCK="--block-size needs a multiple of 32 (vLLM's CPU attention), not '$BLOCK'"
case "$BLOCK" in ''|0*|*[!0-9]*) die "$BAD_BLOCK" ;; esac
[ $(( BLOCK % 32 )) -eq 0 ] || die "$BAD_BLOCK"
case "$DTYPE" in bfloat16|float32|float16|auto) ;; *) die "--dtype must be bfloat16, float32, float16 or auto, not '$DTYPE'" ;; esac

RUN_DIR=".cache/vllm"
LOG="$RUN_DIR/server-$PORT.log"
PIDFILE="$RUN_DIR/server-$PORT.pid"
URL="http://127.0.0.1:$PORT"

NAME=server
healthy() { curl -sf -o /dev/null -m 10 "$URL/health"; }
ready() { healthy && curl -sf -o /dev/null -m 10 "$URL/v1/models"; }
# shellcheck source=scripts/lib/service.sh
. scripts/lib/service.sh

case "$CMD" in
  status) service_status ;;
  stop) stop_service; exit 0 ;;
  restart) restart_service "$0" ;;
  start) ;;
  *) usage ;;
esac

# ---- start ----
start_checks
remember_start "${START_ARGS[@]}"
[ -x .venv-vllm/bin/python ] || die ".venv-vllm is missing: run bash scripts/install_vllm.sh"
resolve_model
[ -f "$MODEL/config.json" ] || die "no model folder at '$MODEL' (config.json missing)"

CORES=$(nproc)
ARGS=(--model "$MODEL" --host 127.0.0.1 --port "$PORT" --dtype "$DTYPE" --max-model-len 2048
      --kv-cache-memory-bytes $(( KV_GIB * 1024 * 1024 * 1024 )) --block-size "$BLOCK" --generation-config vllm
      --enable-prompt-tokens-details --disable-uvicorn-access-log)
[ "$COMPILE" = yes ] || ARGS+=(--enforce-eager)
if [ "$STOCK" = yes ]; then
  export VLLM_PLUGINS=""
  ARGS+=(--logprobs-mode processed_logprobs)
elif [ "$STOCK" = plain ]; then
  export VLLM_PLUGINS=""  # the plugin's server without it: every other option the same
  ARGS+=(--structured-outputs-config.backend xgrammar)
else
  export VLLM_PLUGINS=presto_onepass
  ARGS+=(--structured-outputs-config.backend xgrammar)  # the one grammar library the plugin resumes exactly
fi
export VLLM_USE_V2_MODEL_RUNNER=0 VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_OMP_THREADS_BIND="0-$(( CORES - 1 ))"
export VLLM_CPU_KVCACHE_SPACE="$KV_GIB"

say "cpu ($CORES cores), dtype $DTYPE, $( [ "$STOCK" = yes ] && echo stock || echo 'plugin presto_onepass'), $MODEL on $URL"
launch .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server "${ARGS[@]}" "${EXTRA[@]}"
