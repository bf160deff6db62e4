#!/usr/bin/env bash
# The project's test command, in three tiers, fastest first (docs/design.md §8):
#
#   bash scripts/test.sh             every tier in order; stops after the first tier that fails
#   bash scripts/test.sh --tier 1    static checks (ruff lint, ruff format --check, lint-imports, mypy), then every test
#                                    that needs no server, is not a law suite and takes < 10 s: unit,
#                                    engine, CLI/serve and exactness tests, the coupling grid as an
#                                    all-pairs covering design (a few minutes)
#   bash scripts/test.sh --tier 2    the statistical law suites (marker `law`), the full coupling
#                                    products (`fullgrid`) and the other tests over 10 s (`slow`)
#   bash scripts/test.sh --tier 3    the real-server tests (marker `server`; `sglang` and `vllm` imply
#                                    it) but Gemma 3's in .venv, one at a time, then the files that need
#                                    sglang importable with .venv-sglang's python (test_sglang_runtime.py,
#                                    test_power_gen_programs.py, test_sglang_programs.py,
#                                    test_sglang_attention.py, test_power_scope.py; the .venv run
#                                    skips them)
#   bash scripts/test.sh --tier 4    Gemma 3 270M on its real SGLang and vLLM servers (marker `gemma3`;
#                                    PRESTO_SGL_GEMMA3_SGLANG_URL / PRESTO_SGL_GEMMA3_VLLM_URL), then
#                                    its program file with .venv-sglang (test_gemma3_programs.py)
#   bash scripts/test.sh ARGS...     plain pytest with ARGS in .venv (e.g. `-m exactness`, a file, `-k
#                                    coupling`), then those of the sglang files among ARGS (all of them
#                                    when ARGS names no test file) with .venv-sglang
#
# By marker, for a developer: `-m "not law and not fullgrid and not slow and not server"` is tier 1's
# pytest run, `-m "law or fullgrid"` the long proofs alone. Tiers 1 and 2 spread over
# PRESTO_SGL_TEST_JOBS workers (default: every core; pytest-xdist); tier 3 runs one test at a time
# (the servers are shared). Every test has a deadline (PRESTO_SGL_TEST_TIMEOUT, default 1800 s): a
# hung test fails by name. Without a server the tier-3 tests skip, unless PRESTO_SGL_REQUIRE_SGLANG=1
# / PRESTO_SGL_REQUIRE_VLLM=1 / PRESTO_SGL_REQUIRE_LMEVAL=1 (CI: .ci/run starts the servers and sets
# them). pytest's exit 5 (no tests collected) counts as success.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/presto-sgl ]; then
  bash scripts/setup.sh || exit 1
fi
RUNTIME_TESTS=(tests/integration/test_sglang_runtime.py tests/integration/test_power_gen_programs.py
               tests/integration/test_sglang_programs.py tests/integration/test_sglang_attention.py
               tests/integration/test_power_scope.py)
TIER1="not server and not law and not fullgrid and not slow"
TIER2="not server and (law or fullgrid or slow)"
TIER3="server and not gemma3"
TIER4="gemma3"
GEMMA3_RUNTIME_TESTS=(tests/integration/test_gemma3_programs.py)
JOBS="${PRESTO_SGL_TEST_JOBS:-$(nproc)}"
COMMON=(-p no:cacheprovider "--timeout=${PRESTO_SGL_TEST_TIMEOUT:-1800}" --durations=15)
PARALLEL=(-n "$JOBS" --dist loadgroup)  # a module marked xdist_group runs on one worker (test_gemma3.py)

passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
say() { echo "test.sh: $*" >&2; }

static_checks() {  # ruff at once (seconds); mypy beside the tier-1 tests (its pid in MYPY_PID)
  mkdir -p .cache/logs
  .venv/bin/ruff check . || { say "ruff check failed (tier 1)"; return 1; }
  .venv/bin/ruff format --check . || { say "ruff format --check failed: run .venv/bin/ruff format . (tier 1)"; return 1; }
  .venv/bin/lint-imports --no-cache >.cache/logs/lint-imports.log 2>&1 \
    || { cat .cache/logs/lint-imports.log; say "lint-imports failed: an import runs up a layer ([tool.importlinter] in pyproject.toml, docs/design.md §9) (tier 1)"; return 1; }
  .venv/bin/mypy >.cache/logs/mypy.log 2>&1 &
  MYPY_PID=$!
}

sglang_runtime() {  # the files that need sglang importable, with .venv-sglang's python
  if [ "$#" -eq 0 ]; then
    return 0
  elif [ -x .venv-sglang/bin/python ]; then
    .venv-sglang/bin/python -m pytest "$@"
  elif [ "${PRESTO_SGL_REQUIRE_SGLANG:-}" = 1 ]; then
    say "PRESTO_SGL_REQUIRE_SGLANG=1 but .venv-sglang is missing; run bash scripts/install_sglang.sh"
    return 1
  else
    say "skipped $* (no .venv-sglang; bash scripts/install_sglang.sh creates it)"
  fi
}

tier() {  # N: run tier N; its exit status
  local n="$1" rc=0 t0=$SECONDS
  echo "=== tier $n ===" >&2
  case "$n" in
    1)
      static_checks || return 1
      .venv/bin/python -m pytest "${PARALLEL[@]}" -m "$TIER1" "${COMMON[@]}"
      rc=$?
      if wait "$MYPY_PID"; then
        tail -n 1 .cache/logs/mypy.log
      else
        cat .cache/logs/mypy.log
        say "mypy failed (tier 1)"
        passed "$rc" && rc=1
      fi
      ;;
    2)
      .venv/bin/python -m pytest "${PARALLEL[@]}" -m "$TIER2" "${COMMON[@]}"
      rc=$?
      ;;
    3)
      if [ ! -x .venv-lmeval/bin/lm_eval ] && [ "${PRESTO_SGL_REQUIRE_LMEVAL:-}" != 1 ]; then
        say "tests/integration/test_lm_eval.py will skip (no .venv-lmeval; bash scripts/install_lmeval.sh creates it)"
      fi
      .venv/bin/python -m pytest -m "$TIER3" "${COMMON[@]}"
      rc=$?
      if passed "$rc"; then
        sglang_runtime "${RUNTIME_TESTS[@]}" "${COMMON[@]}"
        rc=$?
      fi
      ;;
    4)
      .venv/bin/python -m pytest -m "$TIER4" "${COMMON[@]}"
      rc=$?
      if passed "$rc"; then
        sglang_runtime "${GEMMA3_RUNTIME_TESTS[@]}" "${COMMON[@]}"
        rc=$?
      fi
      ;;
    *)
      say "--tier: $n is not a tier; choose 1, 2, 3 or 4"
      return 2
      ;;
  esac
  if passed "$rc"; then
    say "tier $n passed in $((SECONDS - t0)) s"
    return 0
  fi
  say "tier $n FAILED (exit $rc) after $((SECONDS - t0)) s"
  return "$rc"
}

if [ "$#" -eq 0 ]; then
  for n in 1 2 3 4; do
    tier "$n" || exit $?
  done
  exit 0
fi
if [ "$1" = --tier ]; then
  [ "$#" -eq 2 ] || { say "usage: bash scripts/test.sh [--tier 1|2|3|4 | PYTEST_ARGS...]"; exit 2; }
  tier "$2"
  exit $?
fi

# Plain pytest with the given arguments; then the sglang files among them (all when none is named).
.venv/bin/python -m pytest "$@"
rc=$?
passed "$rc" || say "pytest in .venv failed (exit $rc)"
options=() runtime_paths=() named_paths=no
for arg in "$@"; do
  case "$arg" in
    *test_sglang_runtime.py*|*test_power_gen_programs.py*|*test_sglang_programs.py*|*test_sglang_attention.py*|*test_gemma3_programs.py*|*test_power_scope.py*)
      runtime_paths+=("$arg"); named_paths=yes ;;
    tests/*|*.py|*.py::*) named_paths=yes ;;
    *) options+=("$arg") ;;
  esac
done
[ "$named_paths" = no ] && runtime_paths=("${RUNTIME_TESTS[@]}")
rc2=0
if [ "${#runtime_paths[@]}" -gt 0 ]; then
  sglang_runtime "${runtime_paths[@]}" "${options[@]}"
  rc2=$?
  passed "$rc2" || say "pytest in .venv-sglang failed (exit $rc2)"
fi
passed "$rc" || exit "$rc"
passed "$rc2" || exit "$rc2"
exit 0
