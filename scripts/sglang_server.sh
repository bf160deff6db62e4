#!/usr/bin/env bash
# Start, stop or query a local SGLang server (from .venv-sglang, see
# scripts/install_sglang.sh) serving SmolLM2-135M-Instruct on 127.0.0.1.
#
#   bash scripts/sglang_server.sh start  [--port 30000] [--dtype bfloat16] [--model DIR|NAME] [--timeout 300]
#                                        [--batched-attention] [--cdf-sampling] [--profile DIR] [--test-retract]
#   bash scripts/sglang_server.sh stop   [--port 30000]
#   bash scripts/sglang_server.sh restart [--port 30000]   (stop, then start with the last start's options)
#   bash scripts/sglang_server.sh status [--port 30000]
#
# start materializes the model folder through the main venv (.venv; honours
# $PRESTO_SGL_CACHE) unless --model is a folder (a name such as gemma3 is materialized the same way), launches `python -m sglang.launch_server`
# in its own process group (log: .cache/sglang/server-PORT.log, PID file:
# .cache/sglang/server-PORT.pid) and waits until GET /health answers 200; on timeout or
# early exit it prints the log tail, stops the server and fails. --dtype float32 for
# exactness tests, bfloat16 (default) for speed. Without nvidia-smi the CPU engine is
# used (SGLANG_USE_CPU_ENGINE=1, torch_native attention, no CUDA graphs). --batched-attention
# replaces torch_native's per-request attention loop with presto-sgl's batched version
# (PRESTO_SGL_BATCHED_ATTENTION=1, installed by the plugin; presto_sgl/server_side/sglang/cpu/attention.py).
# --cdf-sampling draws each token by one uniform and the row's cumulative distribution instead
# of SGLang's one exponential per vocabulary entry (PRESTO_SGL_CDF_SAMPLING=1; sampling.py).
# --profile DIR times the scheduler's batch steps, model forward, sampling and attention into
# DIR (PRESTO_SGL_PROFILE; presto_sgl/server_side/sglang/cpu/profile.py, benchmarks/sglang_profile.py).
# --test-retract sets SGLang's own SGLANG_TEST_RETRACT=1: every third decode step retracts a running
# request (as a full KV pool would; re-prefilled later), for tests.
# Extra arguments after `--` go to sglang.launch_server unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
say() { echo "sglang_server: $*"; }
die() { echo "sglang_server: ERROR: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
CMD="$1"; shift
START_ARGS=("$@")
PORT=30000
DTYPE=bfloat16
MODEL=""
TIMEOUT=300
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --batched-attention) export PRESTO_SGL_BATCHED_ATTENTION=1; shift ;;
    --cdf-sampling) export PRESTO_SGL_CDF_SAMPLING=1; shift ;;
    --test-retract) export SGLANG_TEST_RETRACT=1; shift ;;
    --profile) mkdir -p "$2"; PRESTO_SGL_PROFILE="$(cd "$2" && pwd)"; export PRESTO_SGL_PROFILE; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage ;;
    *) die "unknown option: $1" ;;
  esac
done
case "$PORT" in ''|*[!0-9]*) die "--port needs a number, not '$PORT'" ;; esac

RUN_DIR=".cache/sglang"
LOG="$RUN_DIR/server-$PORT.log"
PIDFILE="$RUN_DIR/server-$PORT.pid"
URL="http://127.0.0.1:$PORT"

NAME=server
healthy() { curl -sf -o /dev/null -m 10 "$URL/health"; }
ready() { healthy; }
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
[ -x .venv-sglang/bin/python ] || die ".venv-sglang is missing: run bash scripts/install_sglang.sh"

resolve_model
[ -f "$MODEL/config.json" ] || die "no model folder at '$MODEL' (config.json missing)"

ARGS=(--model-path "$MODEL" --host 127.0.0.1 --port "$PORT" --dtype "$DTYPE" --skip-server-warmup)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  MODE=gpu
  unset SGLANG_USE_CPU_ENGINE
else
  MODE=cpu
  export SGLANG_USE_CPU_ENGINE=1
  ARGS+=(--device cpu --attention-backend torch_native
         --cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled
         --max-total-tokens 16384 --disable-overlap-schedule --sleep-on-idle)
fi
# SGLANG_PLUGINS is a whitelist of plugin names; empty means "load every installed plugin"
# (smg-grpc-servicer, a dependency, registers two). Load only presto-sgl's one-pass plugin
# (installed by install_sglang.sh); SGLANG_PLUGINS=none gives a stock, two-pass server.
export SGLANG_PLUGINS="${SGLANG_PLUGINS:-presto_raw_logprob}"

if [ "${PRESTO_SGL_BATCHED_ATTENTION:-}${PRESTO_SGL_CDF_SAMPLING:-}${PRESTO_SGL_PROFILE:-}" != "" ] && [ "$SGLANG_PLUGINS" = none ]; then
  die "--batched-attention, --cdf-sampling and --profile need the presto_raw_logprob plugin (SGLANG_PLUGINS=none loads none)"
fi
say "$MODE, dtype $DTYPE, $MODEL on $URL$( [ "${PRESTO_SGL_BATCHED_ATTENTION:-}" = 1 ] && echo ', batched attention')$( [ "${PRESTO_SGL_CDF_SAMPLING:-}" = 1 ] && echo ', inverse-CDF sampling')"
launch .venv-sglang/bin/python -m sglang.launch_server "${ARGS[@]}" "${EXTRA[@]}"
