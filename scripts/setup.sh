#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install presto-sgl with its pinned test dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade "pip==25.3"
.venv/bin/python -m pip install --quiet -e ".[test]"
echo "presto-sgl installed in .venv ($(.venv/bin/python --version))"
