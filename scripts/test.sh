#!/usr/bin/env bash
# The project's test command: set up .venv if needed, run the suite with it, then run
# the files that need sglang importable (tests/integration/test_sglang_runtime.py: in-process
# sglang.Engine; test_power_gen_programs.py and test_sglang_programs.py: power_gen in
# @sgl.function programs; test_sglang_attention.py: the batched CPU attention) with
# .venv-sglang's python (the .venv run skips them).
# Extra arguments go to both runs (e.g. `bash scripts/test.sh -m exactness`); when they
# name test files, the second run happens only for those of the sglang files among them.
# Without .venv-sglang the second run is skipped, unless PRESTO_SGL_REQUIRE_SGLANG=1 (CI),
# where that is a failure. pytest's exit 5 (no tests collected) counts as success.
# tests/integration/test_lm_eval.py runs in the .venv run: it only shells out to
# .venv-lmeval/bin/lm_eval (bash scripts/install_lmeval.sh); without that venv it skips, unless
# PRESTO_SGL_REQUIRE_LMEVAL=1 (CI), where it fails.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/presto-sgl ]; then
  bash scripts/setup.sh || exit 1
fi
RUNTIME_TESTS=(tests/integration/test_sglang_runtime.py tests/integration/test_power_gen_programs.py
               tests/integration/test_sglang_programs.py tests/integration/test_sglang_attention.py)

passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }

.venv/bin/python -m pytest "$@"
rc=$?
passed "$rc" || echo "test.sh: pytest in .venv failed (exit $rc)" >&2

# The second run's arguments: the options, and the runtime test file (or the paths to it given).
options=() runtime_paths=() named_paths=no
for arg in "$@"; do
  case "$arg" in
    *test_sglang_runtime.py*|*test_power_gen_programs.py*|*test_sglang_programs.py*|*test_sglang_attention.py*)
      runtime_paths+=("$arg"); named_paths=yes ;;
    tests/*|*.py|*.py::*) named_paths=yes ;;
    *) options+=("$arg") ;;
  esac
done
[ "$named_paths" = no ] && runtime_paths=("${RUNTIME_TESTS[@]}")

rc2=0
if [ "${#runtime_paths[@]}" -eq 0 ]; then
  :
elif [ -x .venv-sglang/bin/python ]; then
  .venv-sglang/bin/python -m pytest "${runtime_paths[@]}" "${options[@]}"
  rc2=$?
  passed "$rc2" || echo "test.sh: pytest in .venv-sglang failed (exit $rc2)" >&2
elif [ "${PRESTO_SGL_REQUIRE_SGLANG:-}" = 1 ]; then
  echo "test.sh: PRESTO_SGL_REQUIRE_SGLANG=1 but .venv-sglang is missing; run bash scripts/install_sglang.sh" >&2
  rc2=1
else
  echo "test.sh: skipped ${RUNTIME_TESTS[*]} (no .venv-sglang; bash scripts/install_sglang.sh creates it)"
fi

if [ "$named_paths" = no ] && [ ! -x .venv-lmeval/bin/lm_eval ] && [ "${PRESTO_SGL_REQUIRE_LMEVAL:-}" != 1 ]; then
  echo "test.sh: tests/integration/test_lm_eval.py skipped (no .venv-lmeval; bash scripts/install_lmeval.sh creates it)"
fi

passed "$rc" || exit "$rc"
passed "$rc2" || exit "$rc2"
exit 0
