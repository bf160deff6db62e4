# Shared by scripts/sglang_server.sh and scripts/sglang_router.sh (sourced, not run):
# a background service on 127.0.0.1:$PORT led by its own process group, with a PID file.
# The caller sets NAME (server|router), PORT, URL, LOG, PIDFILE, TIMEOUT and defines
# `say`, `die`, `healthy` (GET /health answers) and `ready` (healthy enough to serve).
# `remember_start ARGS...` records a start's options beside the PID file, and `restart_service
# SCRIPT` starts the service again with them (the caller's `restart` command).

running_pid() {  # the service's PID when its PID file names a live process, else nothing
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE")
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

group_alive() { kill -0 -- "-$1" 2>/dev/null; }

stop_service() {
  local pid
  if ! pid=$(running_pid); then
    rm -f "$PIDFILE"
    say "no $NAME running on port $PORT"
    return 0
  fi
  say "stopping $NAME (pid $pid, process group $pid) on port $PORT"
  # SIGTERM to the leader first: it ends its own children (SGLang's scheduler, detokenizer).
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

service_status() {  # exit 0 when running (healthy or not yet), 3 when not
  local pid
  if pid=$(running_pid); then
    if healthy; then say "running (pid $pid) at $URL, healthy"; else say "running (pid $pid) at $URL, not healthy yet"; fi
    exit 0
  fi
  say "not running (port $PORT)"
  exit 3
}

start_checks() {  # exit 0 if already running and ready; die if starting, unready or the port is taken
  local pid
  if pid=$(running_pid); then
    ready || die "a $NAME (pid $pid) is already starting or not ready on port $PORT; stop it first"
    say "already running (pid $pid) at $URL"
    exit 0
  fi
  if curl -s -o /dev/null -m 5 "$URL/" 2>/dev/null; then
    die "port $PORT is already in use by another process"
  fi
  mkdir -p "$(dirname "$PIDFILE")"
}

remember_start() {  # ARGS...: the options of this start, for `restart`
  printf '%s\n' "$@" >"${PIDFILE%.pid}.args"
}

restart_service() {  # SCRIPT: stop (if running), then start with the options of the last start
  local args="${PIDFILE%.pid}.args" saved
  [ -f "$args" ] || die "no recorded start of a $NAME on port $PORT ($args); start it with \`$1 start\` first"
  mapfile -t saved <"$args"
  stop_service
  exec bash "$1" start "${saved[@]}"
}

launch() {  # launch COMMAND... in its own process group (setsid: pgid == pid), then wait until ready
  say "starting: log $LOG"
  local started pid
  started=$(date +%s)
  setsid "$@" >"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  while true; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "----- last 60 lines of $LOG -----" >&2; tail -n 60 "$LOG" >&2
      rm -f "$PIDFILE"
      die "$NAME exited during startup (see $LOG)"
    fi
    if ready; then break; fi
    if [ $(( $(date +%s) - started )) -ge "$TIMEOUT" ]; then
      echo "----- last 60 lines of $LOG -----" >&2; tail -n 60 "$LOG" >&2
      stop_service
      die "$NAME not ready after ${TIMEOUT} s (see $LOG)"
    fi
    sleep 1
  done
  say "ready after $(( $(date +%s) - started )) s (pid $pid) at $URL"
}

resolve_model() {  # MODEL: a folder stays; a name (default smollm2) is materialized through .venv into its folder
  if [ ! -d "$MODEL" ]; then
    local named="${MODEL:-smollm2}"
    [ -x .venv/bin/python ] || die ".venv is missing: run bash scripts/setup.sh (or pass --model DIR)"
    say "materializing $named via .venv"
    MODEL=$(.venv/bin/python -c "import sys; from presto_sgl.models import resolve; print(resolve(sys.argv[1]))" \
      "$named" | tail -n 1)
  fi
}
