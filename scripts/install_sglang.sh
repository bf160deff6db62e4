#!/usr/bin/env bash
# Install SGLang (pinned) into its own venv, .venv-sglang (git-ignored), for
# scripts/sglang_server.sh. Idempotent: does nothing when the venv already holds the
# pinned install (checked by importing sglang and comparing a stamp file).
#
# GPU machine (nvidia-smi works): a plain `uv pip install sglang==0.5.23`.
# CPU-only machine: the same with scripts/sglang_cpu/overrides.txt (local CPU torch
# 2.13.0 from /opt/wheels, CUDA-only dependencies disabled) and constraints.txt (every
# package at its tested version), plus two shims:
#   - scripts/sglang_cpu/sgl_kernel_stub: a stand-in `sgl_kernel` module;
#   - scripts/sglang_cpu/patch_torchvision.py: makes PyPI's CUDA-linked torchvision
#     importable beside CPU torch.
# Also sglang-router (pinned; its wheel holds the Rust router, its few Python dependencies are
# sglang's too) for scripts/sglang_router.sh, and pytest for tests/integration/test_sglang_runtime.py,
# both checked and installed on every run (cheap).
# See scripts/sglang_cpu/README.md. Env: PYTHON (default python3, >= 3.11),
# SGLANG_INSTALL_MODE=cpu|gpu to override the detection, WHEELS_DIR (default /opt/wheels).
set -euo pipefail
cd "$(dirname "$0")/.."

SGLANG_VERSION="0.5.23"
ROUTER_VERSION="0.3.2"  # the last sglang-router release (2026-01); later routers are PyPI `smg`
UV_VERSION="0.13.9"
CPU_TORCH="2.13.0+cpu"
VENV=".venv-sglang"
SHIMS="scripts/sglang_cpu"
WHEELS_DIR="${WHEELS_DIR:-/opt/wheels}"
PY="${PYTHON:-python3}"
STAMP="$VENV/presto-sgl-install.txt"

say() { echo "install_sglang: $*"; }
die() { echo "install_sglang: ERROR: $*" >&2; exit 1; }

if [ -n "${SGLANG_INSTALL_MODE:-}" ]; then
  MODE="$SGLANG_INSTALL_MODE"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  MODE="gpu"
else
  MODE="cpu"
fi
case "$MODE" in cpu|gpu) ;; *) die "SGLANG_INSTALL_MODE must be cpu or gpu, not '$MODE'" ;; esac

# What the stamp records: the pins, the mode and (CPU) a hash of the override file and shims,
# so editing any of them makes the next run reinstall.
want_stamp() {
  echo "sglang==$SGLANG_VERSION uv==$UV_VERSION mode=$MODE"
  if [ "$MODE" = cpu ]; then
    (cd "$SHIMS" && find overrides.txt constraints.txt patch_torchvision.py sgl_kernel_stub -type f \
      ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
  fi
}

# The check after an install, and the idempotency check before one.
verify() {
  "$VENV/bin/python" - "$SGLANG_VERSION" "$MODE" "$CPU_TORCH" <<'EOF'
import sys
want, mode, cpu_torch = sys.argv[1:4]
import importlib.metadata as md
import sglang
got = md.version("sglang")
assert got == want, f"sglang {got} installed, {want} pinned"
import torch
if mode == "cpu":
    assert torch.__version__ == cpu_torch, f"torch {torch.__version__}, expected {cpu_torch}"
    import torchvision  # noqa: F401  (fails without patch_torchvision.py)
    import sgl_kernel
    assert getattr(sgl_kernel, "PRESTO_SGL_STUB", False), "sgl_kernel is not presto-sgl's stub"
print(f"sglang {got}, torch {torch.__version__} ({mode})")
EOF
}

install_router() {
  local got
  got=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang-router"))' 2>/dev/null || true)
  [ "$got" = "$ROUTER_VERSION" ] && return 0
  say "uv pip install sglang-router==$ROUTER_VERSION"
  local pins=()
  [ "$MODE" = cpu ] && pins=(--constraint "$SHIMS/constraints.txt")
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "${pins[@]}" "sglang-router==$ROUTER_VERSION"
}

# pytest, for tests/integration/test_sglang_runtime.py (scripts/test.sh runs it with this venv's python):
# pytest, pytest-timeout (scripts/test.sh gives every test a deadline), iniconfig and pluggy at the
# project's pins (scripts/constraints.txt, as in .venv); what it shares with sglang (packaging,
# pygments) stays at this venv's CPU pins.
install_pytest() {
  local want got pins=()
  want=$(sed -n 's/^pytest==//p' scripts/constraints.txt)
  got=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pytest")); m.version("pytest-timeout")' \
    2>/dev/null || true)
  [ "$got" = "$want" ] && return 0
  say "uv pip install pytest==$want"
  [ "$MODE" = cpu ] && pins=(--constraint "$SHIMS/constraints.txt")
  # shellcheck disable=SC2046  (one requirement per line)
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "${pins[@]}" \
    $(grep -E '^(pytest|pytest-timeout|iniconfig|pluggy)==' scripts/constraints.txt)
}

# (`import sglang` alone takes ~15 s on 2 cores.)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ] \
   && got=$(verify 2>/dev/null); then
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps \
    --build-constraints scripts/constraints.txt -e .  # the plugin (cheap)
  install_router
  install_pytest
  say "already installed in $VENV: $got, sglang-router $ROUTER_VERSION"
  exit 0
fi

start=$(date +%s)
say "mode: $MODE; installing sglang==$SGLANG_VERSION into $VENV"

"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PY is $("$PY" --version 2>&1); sglang $SGLANG_VERSION needs Python >= 3.11 (set PYTHON)"
if [ -f "$STAMP" ] && ! grep -q "mode=$MODE\b" "$STAMP"; then
  # A CPU venv holds the sgl_kernel stub, which would shadow sglang-kernel's real module.
  say "removing $VENV (installed for another mode: $(head -n 1 "$STAMP"))"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"

say "pip install uv==$UV_VERSION"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
UV=("$VENV/bin/uv" pip install --python "$VENV/bin/python")

if [ "$MODE" = gpu ]; then
  say "uv pip install sglang==$SGLANG_VERSION (GPU: sglang's own pins, CUDA torch)"
  "${UV[@]}" "sglang==$SGLANG_VERSION"
else
  ls "$WHEELS_DIR"/torch-"$CPU_TORCH"-*.whl >/dev/null 2>&1 \
    || die "no torch-$CPU_TORCH wheel in $WHEELS_DIR (set WHEELS_DIR to a folder holding one)"
  say "uv pip install sglang==$SGLANG_VERSION + sgl_kernel stub (CPU: $SHIMS/overrides.txt and constraints.txt, torch from $WHEELS_DIR)"
  # --reinstall-package: rebuild the stub from its folder even when its version is unchanged.
  "${UV[@]}" --find-links "$WHEELS_DIR" --override "$SHIMS/overrides.txt" \
    --constraint "$SHIMS/constraints.txt" --reinstall-package presto-sgl-kernel-cpu-stub \
    "sglang==$SGLANG_VERSION" "./$SHIMS/sgl_kernel_stub"
  say "patching torchvision for CPU torch"
  "$VENV/bin/python" "$SHIMS/patch_torchvision.py"
fi

# presto-sgl itself (editable, no dependencies; built with the setuptools pinned in
# scripts/constraints.txt): registers the one-pass plugin `presto_raw_logprob` in the entry point
# group sglang.srt.plugins. Re-run each time (cheap). scripts/check_install.sh swaps it for the
# wheel (a plain pip install, to prove it changes nothing else) and then puts this one back.
say "installing presto-sgl (editable, --no-deps) for the presto_raw_logprob plugin"
"${UV[@]}" --no-deps --build-constraints scripts/constraints.txt -e .

install_router
install_pytest

say "verifying"
verify || die "the install in $VENV does not import as pinned (see above)"
want_stamp > "$STAMP"
say "done in $(( $(date +%s) - start )) s; $VENV is $(du -sh "$VENV" | cut -f1)"
