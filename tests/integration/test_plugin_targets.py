"""A server whose SGLang or vLLM lacks a target of presto-sgl's plugin refuses to start, naming it.

Each test launches the server as a user does (``python -m sglang.launch_server`` /
``python -m vllm.entrypoints.openai.api_server``, from its own venv) through a driver that first
renames one of the plugin's hook targets, as another SGLang or vLLM version would have it. SGLang's
own plugin loader only logs a hook it cannot apply and serves on; presto-sgl's check
(presto_sgl/server_side/targets.py) must stop the launch, before any model loads, with the
target's name and the fix.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python(venv: str, require: str) -> str:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        if os.environ.get(require) == "1":
            pytest.fail(f"{require}=1 but {venv} is missing")
        pytest.skip(f"no {venv}")
    return str(python)


RENAMED = "_renamed_in_a_later_version"


def _launch(python: str, rename: str, argv: list[str], env: dict[str, str]):
    """Run ``python -m <server>`` (``argv``) after ``rename`` (code) gave one hook target another name.
    The launch must end by itself (a server that started anyway would be killed at the timeout,
    with its process group)."""
    run = f"runpy.run_module({argv[0]!r}, run_name='__main__')"
    driver = f"import runpy, sys, importlib; {rename}; sys.argv = {argv!r}; {run}"
    proc = subprocess.Popen(
        [python, "-c", driver],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the server started without its hook target: {out[-2000:]}")
    return proc.returncode, out


SERVERS = {
    "sglang": (
        ".venv-sglang",
        ["sglang.launch_server", "--model-path", "{model}", "--device", "cpu", "--port", "1"],
        {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_PLUGINS": "presto_raw_logprob"},
        f"m = importlib.import_module('presto_sgl.server_side.sglang.plugin'); m.SAMPLE += {RENAMED!r}",
        f"ModelRunner.sample{RENAMED}",
    ),
    "vllm": (
        ".venv-vllm",
        ["vllm.entrypoints.openai.api_server", "--model", "{model}", "--port", "1", "--max-model-len", "256"],
        {"VLLM_PLUGINS": "presto_onepass", "VLLM_CPU_KVCACHE_SPACE": "1"},
        "m = importlib.import_module('presto_sgl.server_side.vllm.plugin'); "
        f"m.TARGETS = tuple(t + {RENAMED!r} if t == m.BITMASK else t for t in m.TARGETS)",
        f"apply_grammar_bitmask{RENAMED}",
    ),
}
"""Per server: its venv, its launch as a user runs it, its environment, the renaming, the renamed target."""


@pytest.mark.parametrize("server", [pytest.param(s, marks=getattr(pytest.mark, s)) for s in SERVERS])
def test_a_server_refuses_to_start_without_a_hook_target(server):
    from presto_sgl.models import materialize_smollm2

    venv, argv, env, rename, target = SERVERS[server]
    python = _python(venv, f"PRESTO_SGL_REQUIRE_{server.upper()}")
    model = str(materialize_smollm2())
    code, out = _launch(python, rename, [a.format(model=model) for a in argv], env)
    assert code != 0, out[-2000:]
    assert target in out and f"cannot hook {server}" in out, out[-2000:]
    assert f"{server.upper()}_PLUGINS=none" in out  # the fix: another presto-sgl, the pinned version, or no plugin
