#!/usr/bin/env bash
# Start, stop or query a local SGLang server (from .venv-sglang, see
# scripts/install_sglang.sh) serving SmolLM2-135M-Instruct on 127.0.0.1.
#
#   bash scripts/sglang_server.sh start  [--port 30000] [--dtype bfloat16] [--model DIR] [--timeout 300]
#   bash scripts/sglang_server.sh stop   [--port 30000]
#   bash scripts/sglang_server.sh status [--port 30000]
#
# start materializes the model folder through the main venv (.venv; honours
# $PRESTO_SGL_CACHE) unless --model is given, launches `python -m sglang.launch_server`
# in its own process group (log: .cache/sglang/server-PORT.log, PID file:
# .cache/sglang/server-PORT.pid) and waits until GET /health answers 200; on timeout or
# early exit it prints the log tail, stops the server and fails. --dtype float32 for
# exactness tests, bfloat16 (default) for speed. Without nvidia-smi the CPU engine is
# used (SGLANG_USE_CPU_ENGINE=1, torch_native attention, no CUDA graphs).
# Extra arguments after `--` go to sglang.launch_server unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
say() { echo "sglang_server: $*"; }
die() { echo "sglang_server: ERROR: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
CMD="$1"; shift
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

running_pid() {  # the server's PID when its PID file names a live process, else nothing
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE")
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}
group_alive() { kill -0 -- "-$1" 2>/dev/null; }
healthy() { curl -sf -o /dev/null -m 10 "$URL/health"; }

stop_server() {
  local pid
  if ! pid=$(running_pid); then
    rm -f "$PIDFILE"
    say "no server running on port $PORT"
    return 0
  fi
  say "stopping server (pid $pid, process group $pid) on port $PORT"
  # SIGTERM to the launcher first: SGLang then ends its scheduler and detokenizer itself.
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do group_alive "$pid" || break; sleep 0.5; done
  if group_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do group_alive "$pid" || break; sleep 0.5; done
  fi
  if group_alive "$pid"; then
    say "process group $pid still alive: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$PIDFILE"
  say "stopped"
}

case "$CMD" in
  status)
    if pid=$(running_pid); then
      if healthy; then say "running (pid $pid) at $URL, healthy"; else say "running (pid $pid) at $URL, not healthy yet"; fi
      exit 0
    fi
    say "not running (port $PORT)"; exit 3 ;;
  stop)
    stop_server; exit 0 ;;
  start) ;;
  *) usage ;;
esac

# ---- start ----
if pid=$(running_pid); then
  healthy || die "a server (pid $pid) is already starting or unhealthy on port $PORT; stop it first"
  say "already running (pid $pid) at $URL"
  exit 0
fi
[ -x .venv-sglang/bin/python ] || die ".venv-sglang is missing: run bash scripts/install_sglang.sh"
if curl -s -o /dev/null -m 5 "$URL/" 2>/dev/null; then
  die "port $PORT is already in use by another process"
fi
mkdir -p "$RUN_DIR"

if [ -z "$MODEL" ]; then
  [ -x .venv/bin/python ] || die ".venv is missing: run bash scripts/setup.sh (or pass --model DIR)"
  say "materializing SmolLM2-135M-Instruct via .venv"
  MODEL=$(.venv/bin/python -c "from presto_sgl.models import materialize_smollm2; print(materialize_smollm2())" | tail -n 1)
fi
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

say "starting ($MODE, dtype $DTYPE) $MODEL on $URL; log $LOG"
started=$(date +%s)
# setsid: the server leads its own process group (pgid == pid), so stop can end all of it.
setsid .venv-sglang/bin/python -m sglang.launch_server "${ARGS[@]}" "${EXTRA[@]}" \
  >"$LOG" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$PIDFILE"

while true; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "----- last 60 lines of $LOG -----" >&2; tail -n 60 "$LOG" >&2
    rm -f "$PIDFILE"
    die "server exited during startup (see $LOG)"
  fi
  if healthy; then break; fi
  if [ $(( $(date +%s) - started )) -ge "$TIMEOUT" ]; then
    echo "----- last 60 lines of $LOG -----" >&2; tail -n 60 "$LOG" >&2
    stop_server
    die "server not healthy after ${TIMEOUT} s (see $LOG)"
  fi
  sleep 1
done
say "ready after $(( $(date +%s) - started )) s (pid $pid) at $URL"
