#!/usr/bin/env bash
# Start, stop or query an SGLang router (sglang-router, pinned in scripts/install_sglang.sh,
# from .venv-sglang) in front of running SGLang servers on 127.0.0.1.
#
#   bash scripts/sglang_router.sh start  [--port 30001] [--worker-url http://127.0.0.1:30000 ...] [--timeout 120]
#                                        [--policy cache_aware|round_robin|manual|random|power_of_two]
#   bash scripts/sglang_router.sh stop   [--port 30001]
#   bash scripts/sglang_router.sh status [--port 30001]
#
# start launches `python -m sglang_router.launch_router` (--policy, default cache_aware;
# manual follows presto-sgl's per-chain X-SMG-Routing-Key, keeping a chain on one worker) in its own
# process group (log: .cache/sglang/router-PORT.log, PID file: .cache/sglang/router-PORT.pid)
# and waits until GET /health answers 200 and GET /workers lists every worker; on timeout
# or early exit it prints the log tail, stops the router and fails. --worker-url may be
# repeated (default: http://127.0.0.1:30000); the workers must be healthy already.
# Extra arguments after `--` go to sglang_router.launch_router unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
say() { echo "sglang_router: $*"; }
die() { echo "sglang_router: ERROR: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
CMD="$1"; shift
PORT=30001
WORKERS=()
TIMEOUT=120
POLICY=cache_aware
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --worker-url) WORKERS+=("$2"); shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --policy) POLICY="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage ;;
    *) die "unknown option: $1" ;;
  esac
done
case "$PORT" in ''|*[!0-9]*) die "--port needs a number, not '$PORT'" ;; esac
[ ${#WORKERS[@]} -gt 0 ] || WORKERS=("http://127.0.0.1:30000")

RUN_DIR=".cache/sglang"
LOG="$RUN_DIR/router-$PORT.log"
PIDFILE="$RUN_DIR/router-$PORT.pid"
URL="http://127.0.0.1:$PORT"

NAME=router
healthy() { curl -sf -o /dev/null -m 5 "$URL/health"; }
ready() {  # healthy and every worker registered
  healthy || return 1
  local listed; listed=$(curl -sf -m 5 "$URL/workers") || return 1
  for w in "${WORKERS[@]}"; do case "$listed" in *"\"$w\""*) ;; *) return 1 ;; esac; done
}
# shellcheck source=scripts/lib/service.sh
. scripts/lib/service.sh

case "$CMD" in
  status) service_status ;;
  stop) stop_service; exit 0 ;;
  start) ;;
  *) usage ;;
esac

# ---- start ----
start_checks
.venv-sglang/bin/python -c "import sglang_router" 2>/dev/null \
  || die "sglang-router is not installed in .venv-sglang: run bash scripts/install_sglang.sh"
for w in "${WORKERS[@]}"; do
  curl -sf -o /dev/null -m 10 "$w/health" || die "worker $w is not healthy; start it first (bash scripts/sglang_server.sh start)"
done
case "$POLICY" in cache_aware|round_robin|manual|random|power_of_two) ;; *) die "--policy must be cache_aware, round_robin, manual, random or power_of_two, not '$POLICY'" ;; esac
say "in front of ${WORKERS[*]} on $URL, policy $POLICY"
launch .venv-sglang/bin/python -m sglang_router.launch_router --host 127.0.0.1 --port "$PORT" \
  --worker-urls "${WORKERS[@]}" --policy "$POLICY" --log-level warn "${EXTRA[@]}"
