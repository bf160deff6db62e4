"""``presto-sgl serve`` in tests and benchmarks: the app on a real uvicorn server in a thread, or the CLI
in a subprocess, and an ``openai`` client for either (no retries: every answer is seen)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import uvicorn

from presto_sgl.config import sampling_configs
from presto_sgl.engines.base import Engine
from presto_sgl.scheduling.pool import ChainPool
from presto_sgl.scheduling.scheduler import Scheduler
from presto_sgl.serve.app import AppOptions, create_app
from presto_sgl.serve.request import Defaults
from presto_sgl.serve.service import Service

from .mutants import cli_command
from .servers import free_port


def make_service(
    engine: Engine,
    model: str = "test-model",
    *,
    concurrency: int = 2,
    queue_size: int = 8,
    seed: int | None = None,
    max_n: int = 16,
    rule: str = "step",
    scheduler: bool = False,
    **power,
) -> Service:
    """A service as ``presto-sgl serve`` builds it; ``scheduler``: with the shared scheduler."""
    config, presto = sampling_configs(rule, **({"max_new_tokens": 16, "block_size": 8, "steps": 3} | power))
    pool = ChainPool(concurrency, queue_size, Scheduler(engine) if scheduler else None)
    return Service(engine, Defaults(config, presto, seed=seed, max_n=max_n), pool, model)


@contextlib.contextmanager
def serving(service: Service, *, request_timeout_s: float = 600.0, **app_options) -> Iterator[str]:
    """The service's app on 127.0.0.1 (a free port) for the block: yields the base URL.
    ``app_options`` are :class:`AppOptions` fields (``keepalive_s``, ``api_key``, ``max_body_bytes``)."""
    port = free_port()
    app = create_app(service, AppOptions(request_timeout_s=request_timeout_s, poll_s=0.05, **app_options))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the serve app did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextlib.contextmanager
def serve_cli(*args: str, timeout_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``presto-sgl serve ARGS --port P`` in a subprocess until /health answers; yields (URL, process)."""
    port = free_port()
    cmd = [*cli_command(), "serve", *args, "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, f"serve exited {proc.returncode}: {proc.stdout.read()[-3000:]}"
            try:
                urllib.request.urlopen(url + "/health", timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "serve did not answer /health"
                time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def client(url: str, timeout_s: float = 300.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout_s)


def health(url: str) -> dict:
    """``GET /health`` as JSON, whatever its status."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def wait_for(predicate, timeout_s: float = 60.0, interval_s: float = 0.05) -> bool:
    """Poll ``predicate()`` until true (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def assert_prompt_scored(url: str, model: str, hf_model, ids: list[int]) -> None:
    """``echo`` with ``logprobs`` on ``serve`` at ``url`` (lm-eval's loglikelihood request) scores
    ``ids`` in one pass as a float32 forward of ``hf_model`` does: log p0 of every token after
    the first, the greedy next token's log p0, and the top alternatives asked for."""
    import httpx
    import torch

    from .forward import TOL, assert_scores_match

    body = {"model": model, "prompt": ids, "echo": True, "logprobs": 2, "max_tokens": 1, "temperature": 0}
    scored = httpx.post(url + "/v1/completions", json=body, timeout=120).json()
    logprobs = scored["choices"][0]["logprobs"]
    assert scored["presto"]["power_sampling"] is False and logprobs["token_logprobs"][0] is None
    assert_scores_match(hf_model, ids[:1], ids[1:], logprobs["token_logprobs"][1:-1])
    with torch.no_grad():
        after = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0, -1].float(), -1)
    assert abs(logprobs["token_logprobs"][-1] - float(after.max())) < TOL
    assert all(len(top) >= 2 for top in logprobs["top_logprobs"][1:])
