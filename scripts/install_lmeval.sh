#!/usr/bin/env bash
# Install lm-evaluation-harness (lm-eval[api]==0.4.13, every dependency pinned in
# scripts/constraints-lmeval.txt) into its own venv, .venv-lmeval (git-ignored), for
# tests/integration/test_lm_eval.py: the test runs .venv-lmeval/bin/lm_eval as a subprocess
# against `presto-sgl serve`, so lm-eval's dependencies (datasets, pyarrow, pandas, sacrebleu,
# ...) stay out of .venv, and .venv's pins out of lm-eval's way.
# Idempotent: does nothing when the venv already holds the pinned install (a stamp file
# recording the version and a hash of the constraints, and an import check).
# Three dependencies ship only as sdists (rouge-score, sqlitedict, word2number); they build
# with the setuptools and wheel pinned in the constraints file, installed first
# (--no-build-isolation: no unpinned build environment).
# Env: PYTHON (default python3, >= 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."

LMEVAL_VERSION="0.4.13"
PIP_VERSION="25.3"
VENV=".venv-lmeval"
CONSTRAINTS="scripts/constraints-lmeval.txt"
PY="${PYTHON:-python3}"
STAMP="$VENV/presto-sgl-install.txt"

say() { echo "install_lmeval: $*"; }
die() { echo "install_lmeval: ERROR: $*" >&2; exit 1; }

want_stamp() {
  echo "lm-eval[api]==$LMEVAL_VERSION pip==$PIP_VERSION"
  sha256sum "$CONSTRAINTS" | cut -d' ' -f1
}

# The check after an install, and the idempotency check before one: the pinned version, and the
# modules `lm_eval --model local-completions / local-chat-completions` imports.
verify() {
  "$VENV/bin/python" - "$LMEVAL_VERSION" <<'EOF'
import sys
import importlib.metadata as md
want = sys.argv[1]
got = md.version("lm_eval")
assert got == want, f"lm_eval {got} installed, {want} pinned"
import aiohttp, datasets, requests, tenacity  # noqa: E401,F401  (the [api] extra, the task loader)
import lm_eval.evaluator  # noqa: F401
from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI  # noqa: F401
print(f"lm_eval {got}, datasets {md.version('datasets')}")
EOF
}

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ] \
   && got=$(verify 2>/dev/null) && [ -x "$VENV/bin/lm_eval" ]; then
  say "already installed in $VENV: $got"
  exit 0
fi

start=$(date +%s)
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PY is $("$PY" --version 2>&1); .venv-lmeval needs Python >= 3.11 (set PYTHON)"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "pip==$PIP_VERSION"
"${PIP[@]}" -c "$CONSTRAINTS" setuptools wheel
say "pip install lm-eval[api]==$LMEVAL_VERSION (pins: $CONSTRAINTS)"
"${PIP[@]}" -c "$CONSTRAINTS" --no-build-isolation "lm-eval[api]==$LMEVAL_VERSION"
say "verifying"
got=$(verify) || die "the install in $VENV does not import as pinned (see above)"
# Every installed package must be pinned: a dependency missing from the constraints file
# would have come in at whatever version PyPI had that day.
unpinned=$("$VENV/bin/python" -m pip freeze --all --disable-pip-version-check \
  | awk -F'==' 'NF == 2 {print tolower($1) "==" $2}' | sed 's/_/-/g' \
  | grep -vxF -f <(tr 'A-Z_' 'a-z-' <"$CONSTRAINTS" | grep '==') || true)
[ -z "$unpinned" ] || die "installed but not pinned in $CONSTRAINTS: $(echo "$unpinned" | tr '\n' ' ')"
want_stamp > "$STAMP"
say "done in $(( $(date +%s) - start )) s: $got; $VENV is $(du -sh "$VENV" | cut -f1)"
