"""Fixtures of the real-server tests. A module marked ``sglang`` or ``vllm`` gets that
server: ``server_url`` (PRESTO_SGL_SGLANG_URL / PRESTO_SGL_VLLM_URL; skipped when unset,
a failure under PRESTO_SGL_REQUIRE_SGLANG=1 / PRESTO_SGL_REQUIRE_VLLM=1, as in CI),
``engine`` (the client engine on it, one pass) and ``hf_model`` (the server's model as a
transformers fp32 forward). A module may define its own fixture of the same name.
``hub_sglang_url`` / ``hub_vllm_url``: the servers ``.ci/run`` starts as a user does, by hub id.
``spare_sglang_url``: the session's own fp32 SGLang server with --batched-attention and a shared
server's options (:data:`SPARE_OPTIONS`), for the tests that compare it with the shared one or kill
it (one start instead of one per test)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

SERVERS = {  # marker: (URL variable, REQUIRE variable, how to get one)
    "sglang": ("PRESTO_SGL_SGLANG_URL", "PRESTO_SGL_REQUIRE_SGLANG", ""),
    "vllm": ("PRESTO_SGL_VLLM_URL", "PRESTO_SGL_REQUIRE_VLLM", "; bash scripts/vllm_server.sh start"),
}


def _server(request: pytest.FixtureRequest) -> str:
    """The module's server marker: ``sglang`` or ``vllm``."""
    marks = {m.name for m in request.node.iter_markers()} & set(SERVERS)
    if len(marks) != 1:
        raise pytest.UsageError(
            f"{request.node.nodeid}: server fixtures need exactly one of the markers {sorted(SERVERS)}"
        )
    return marks.pop()


def _configured_url(server: str) -> str:
    """The URL of the shared ``server``; skips the test without one (fails it where required)."""
    var, require, hint = SERVERS[server]
    url = os.environ.get(var)
    if not url:
        if os.environ.get(require) == "1":
            pytest.fail(f"{require}=1 but {var} is not set")
        pytest.skip(f"no {'SGLang' if server == 'sglang' else 'vLLM'} server (set {var}{hint})")
    return url


@pytest.fixture(scope="module")
def server_url(request: pytest.FixtureRequest) -> str:
    return _configured_url(_server(request))


def _hub_url(var: str, require: str) -> str:
    """The URL of a server started as a user does, by hub id (``.ci/run``); skipped when unset, a
    failure where ``require`` is 1."""
    url = os.environ.get(var)
    if not url:
        if os.environ.get(require) == "1":
            pytest.fail(f"{require}=1 but {var} is not set")
        pytest.skip(f"no {var}")
    return url


@pytest.fixture(scope="module")
def hub_sglang_url() -> str:
    """The user's SGLang server by hub id (test_hub.py)."""
    return _hub_url("PRESTO_SGL_HUB_SGLANG_URL", "PRESTO_SGL_REQUIRE_SGLANG")


@pytest.fixture(scope="module")
def hub_vllm_url() -> str:
    """The user's vLLM server by hub id, with an operator's settings (test_hub.py, test_vllm_settings.py)."""
    return _hub_url("PRESTO_SGL_HUB_VLLM_URL", "PRESTO_SGL_REQUIRE_VLLM")


SPARE_OPTIONS = (
    "--max-total-tokens",
    "2048",
    "--chunked-prefill-size",
    "64",
    "--enable-mixed-chunk",
    "--disable-radix-cache",
    "--schedule-policy",
    "fcfs",
)
"""What an operator of a shared server sets, on the spare server: a small KV pool, small prefill chunks
mixed into decode batches, no prefix cache, first-come-first-served; and the spare retracts a running
request every third decode step (``--test-retract``: SGLang's own SGLANG_TEST_RETRACT, as a full pool
would), so every test on it runs under retraction (tests/integration/test_sglang_settings.py)."""


@pytest.fixture(scope="session")
def spare_sglang_url() -> Iterator[str]:
    from tests.support.servers import free_port, server_script

    _configured_url("sglang")  # no shared server, no spare one (skip or fail alike)
    port = str(free_port())
    flags = ("--dtype", "float32", "--batched-attention", "--test-retract", "--timeout", "600")
    start = ("--port", port, *flags, "--", *SPARE_OPTIONS)
    server_script("sglang_server.sh", "start", *start)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server_script("sglang_server.sh", "stop", "--port", port)


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest, server_url: str):
    """The client engine on the shared server, which must load presto-sgl's plugin (one pass)."""
    if _server(request) == "vllm":
        from presto_sgl.engines.vllm.http import VLLMEngine

        return VLLMEngine(server_url)
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url)
    if eng.mode != "one-pass":
        pytest.fail("the SGLang server runs without presto-sgl's plugin")
    return eng


@pytest.fixture(scope="module")
def hf_model(request: pytest.FixtureRequest, server_url: str):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    if _server(request) == "vllm":
        path = request.getfixturevalue("engine").model_path
    else:
        from presto_sgl.engines.sglang.http import SGLangEngine

        path = SGLangEngine(server_url, mode="two-pass").model_path
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
