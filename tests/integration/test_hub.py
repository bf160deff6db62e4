"""The user's setup: stock servers started by hub id, a deployment whose sampling defaults
would bend the chain, the client with or without the model on its disk.

``.ci/run`` builds a Hugging Face cache (``tests.support.hub``) holding SmolLM2 as
``HuggingFaceTB/SmolLM2-135M-Instruct`` with a generation_config.json that sets
``repetition_penalty 1.05, top_p 0.8, top_k 20, temperature 0.7`` (Qwen2.5-Instruct's), sets
``HF_HOME`` to it and ``HF_HUB_OFFLINE=1``, and starts with plain commands (not the
project's scripts), by that id:
- ``python -m sglang.launch_server --model-path HuggingFaceTB/SmolLM2-135M-Instruct
  --preferred-sampling-params '{"repetition_penalty": 1.05, "top_p": 0.8, "top_k": 20}'``
  (PRESTO_SGL_HUB_SGLANG_URL);
- ``python -m vllm.entrypoints.openai.api_server --model HuggingFaceTB/SmolLM2-135M-Instruct`` (what
  ``vllm serve`` runs) with its default ``--generation-config
  auto`` (PRESTO_SGL_HUB_VLLM_URL) and an operator's settings (no prefix cache, small prefill
  chunks and KV cache); the step rule's coupling with sequential on it, under its generation
  config and preemption: ``test_vllm_settings.py``.
Both load presto-sgl's one-pass plugin from its entry point. Without the URLs these tests
are skipped (a failure with PRESTO_SGL_REQUIRE_SGLANG / _VLLM=1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from presto_sgl.engines.base import Request
from presto_sgl.errors import ConfigError
from tests.support.hub import PENALIZED, SMOLLM2_ID, build_cache

TOL = 1e-4  # per token, float32 server vs a float32 transformers forward of the unprocessed model
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_folder() -> Path:
    from presto_sgl.models import materialize_smollm2

    return materialize_smollm2()


@pytest.fixture(scope="module")
def hf_model(model_folder):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32).eval()


def _forward(model, prefix, tokens):
    """Per token: the float32 logits row of the unprocessed model (no penalty, no truncation)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([list(prefix) + list(tokens)])).logits[0].float()
    return logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]


def assert_unprocessed(model, req: Request, comp, *, check_logq: bool = True) -> float:
    """log q_tau and log p0 of every token equal the unprocessed model's within TOL; the
    largest difference."""
    import torch

    rows = _forward(model, req.prefix, comp.tokens)
    idx = torch.tensor(comp.tokens)[:, None]
    lp = torch.log_softmax(rows, -1).gather(1, idx)[:, 0].tolist()
    lq = torch.log_softmax(rows / req.temperature, -1).gather(1, idx)[:, 0].tolist()
    worst = max(abs(a - b) for a, b in zip(lp, comp.logp))
    assert worst < TOL, f"log p0 differs from the unprocessed forward by {worst:.2e}"
    if check_logq:
        dq = max(abs(a - b) for a, b in zip(lq, comp.logq))
        assert dq < TOL / req.temperature, f"log q differs from the unprocessed forward by {dq:.2e}"
        worst = max(worst, dq * req.temperature)
    return worst


def outside_truncation(model, reqs, comps) -> tuple[int, int]:
    """How many sampled tokens a top-k 20 / a top-p 0.8 truncation could not have drawn."""
    import torch

    beyond_k = beyond_p = 0
    for req, comp in zip(reqs, comps):
        probs = torch.softmax(_forward(model, req.prefix, comp.tokens) / req.temperature, -1)
        for row, t in zip(probs, comp.tokens):
            p = row[t]
            beyond_k += int((row > p).sum()) >= 20
            beyond_p += float(row[row > p].sum()) >= 0.8
    return beyond_k, beyond_p


def _full_vocabulary_draws(engine, model) -> None:
    """At temperature 1 over 8 x 24 tokens, some tokens lie beyond top-k 20 and beyond the
    top-p 0.8 nucleus: the deployment's truncation did not reach the draws (the chance that a
    full-vocabulary sampler never leaves SmolLM2's nucleus in 192 draws is far below 1e-9)."""
    prompt = tuple(engine.chat_prompt("Write a short story about a dragon."))
    reqs = [Request(prompt, 24, 1.0, 100 + i) for i in range(8)]
    comps = engine.generate(reqs)
    beyond_k, beyond_p = outside_truncation(model, reqs, comps)
    assert beyond_k >= 1 and beyond_p >= 1, (beyond_k, beyond_p)
    for r, c in zip(reqs, comps):
        assert_unprocessed(model, r, c)


# -- SGLang ----------------------------------------------------------------------------------------
@pytest.mark.sglang
@pytest.mark.parametrize("mode", ["one-pass", "two-pass"])
def test_sglang_by_hub_id_samples_the_unprocessed_model(hub_sglang_url, hf_model, mode):
    """A stock server by hub id with penalizing preferred params and generation config: the
    client resolves the id here; every token's log q and log p0 are the unprocessed model's."""
    from presto_sgl.engines.sglang.http import SGLangEngine

    engine = SGLangEngine(hub_sglang_url, mode=mode)
    info = engine._call("GET", "/model_info")
    assert info["model_path"] == SMOLLM2_ID and info["preferred_sampling_params"]
    assert engine.model_source == SMOLLM2_ID and engine.text.has_tokenizer
    assert engine.capabilities.vocab_size == 49152 and engine.text.stop_ids == (2,)
    prompt = tuple(engine.chat_prompt("What is 17 + 25?"))
    reqs = [Request(prompt, 12, 0.25), Request(prompt[:-3], 8, 1.0), Request(prompt, 6, 0.5)]
    worst = max(assert_unprocessed(hf_model, r, c) for r, c in zip(reqs, engine.generate(reqs)))
    print(f"sglang {mode}: max |log-prob - float32 forward| = {worst:.2e}")
    _full_vocabulary_draws(engine, hf_model)


@pytest.mark.sglang
def test_sglang_plugin_reads_the_logits_before_any_penalty(hub_sglang_url, hf_model, monkeypatch):
    """A request that does carry a repetition penalty: the server's log q shows it (the
    penalty ran), the plugin's log p0 is still the unprocessed model's (read before
    ``ModelRunner._preprocess_logits``)."""
    import torch

    from presto_sgl.engines.sglang import http

    engine = http.SGLangEngine(hub_sglang_url, mode="one-pass")
    monkeypatch.setitem(http.NEUTRAL, "repetition_penalty", 1.5)
    prompt = tuple(engine.chat_prompt("Repeat the word cat ten times."))
    req = Request(prompt, 16, 1.0)
    (comp,) = engine.generate([req])
    assert_unprocessed(hf_model, req, comp, check_logq=False)
    rows = _forward(hf_model, prompt, comp.tokens)
    lq = torch.log_softmax(rows, -1).gather(1, torch.tensor(comp.tokens)[:, None])[:, 0].tolist()
    assert max(abs(a - b) for a, b in zip(lq, comp.logq)) > 1e-2  # the penalty changed what was sampled from


@pytest.mark.sglang
def test_sglang_refuses_a_tokenizer_of_another_model(hub_sglang_url):
    from presto_sgl.engines.sglang.http import SGLangEngine
    from presto_sgl.models import asset_dir

    with pytest.raises(ConfigError, match="not the served model") as err:
        SGLangEngine(hub_sglang_url, tokenizer=str(asset_dir("tiny-adder")))
    assert err.value.param == "tokenizer"


def _cli(args, hf_home, timeout=600):
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "presto_sgl", *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO
    )


SAMPLE = [
    "sample",
    "--prompt",
    "What is 2+3?",
    "--max-new-tokens",
    "16",
    "--block-size",
    "8",
    "--steps",
    "2",
    "--seed",
    "3",
    "--budget",
    "4",
]


@pytest.mark.sglang
def test_sglang_client_on_another_machine(hub_sglang_url, model_folder, tmp_path):
    """The client with no model folder on its disk: with nothing cached, an error naming
    --tokenizer before any model call; with only the tokenizer and configs cached (what `hf
    download --include '*.json'` gives), or --tokenizer DIR, it samples and prints text."""
    empty = tmp_path / "empty-hf"
    empty.mkdir()
    out = _cli([*SAMPLE, "--engine", "sglang", "--url", hub_sglang_url], empty)
    assert out.returncode == 2 and "--tokenizer" in out.stderr and "Traceback" not in out.stderr, out.stderr
    cached = tmp_path / "tokenizer-hf"
    snapshot = build_cache(model_folder, cached, tokenizer_only=True)
    assert not (snapshot / "model.safetensors").exists()
    by_id = _cli([*SAMPLE, "--engine", "sglang", "--url", hub_sglang_url], cached)
    assert by_id.returncode == 0, by_id.stderr
    by_dir = _cli([*SAMPLE, "--engine", "sglang", "--url", hub_sglang_url, "--tokenizer", str(snapshot)], empty)
    assert by_dir.returncode == 0, by_dir.stderr
    answer = by_id.stdout.split("transitions")[0].strip()
    assert answer and not answer.replace(" ", "").isdigit(), by_id.stdout  # text, not ids


# -- vLLM ------------------------------------------------------------------------------------------
@pytest.mark.vllm
def test_vllm_by_hub_id_samples_the_unprocessed_model(hub_vllm_url, hf_model):
    """``vllm serve ID`` with the model's penalizing generation config as its defaults: every
    token's log q and log p0 are the unprocessed model's, draws span the full vocabulary, and a
    seeded PreSTO chain repeats token for token."""
    from presto_sgl import Sampler, sampling_configs
    from presto_sgl.engines.vllm.http import VLLMEngine

    engine = VLLMEngine(hub_vllm_url)
    assert engine.model == SMOLLM2_ID and engine.model_source == SMOLLM2_ID and engine.mode == "one-pass"
    prompt = tuple(engine.chat_prompt("What is 17 + 25?"))
    reqs = [Request(prompt, 12, 0.25, 1), Request(prompt[:-3], 8, 1.0, 2)]
    worst = max(assert_unprocessed(hf_model, r, c) for r, c in zip(reqs, engine.generate(reqs)))
    print(f"vllm: max |log-prob - float32 forward| = {worst:.2e}")
    _full_vocabulary_draws(engine, hf_model)
    cfg, presto = sampling_configs("step", max_new_tokens=16, block_size=8, steps=4, budget=6)
    runs = [Sampler(engine, cfg, presto).run(prompt, seed=7) for _ in range(2)]
    assert runs[0].state.tokens == runs[1].state.tokens


@pytest.mark.vllm
def test_vllm_plugin_reads_the_logits_before_any_penalty(hub_vllm_url, hf_model, monkeypatch):
    """A request carrying a repetition penalty: the plugin's log p0 is the unprocessed
    model's (read at the entry of ``Sampler.forward``, before ``apply_logits_processors``)."""
    from presto_sgl.engines.vllm import http

    engine = http.VLLMEngine(hub_vllm_url)
    monkeypatch.setitem(http._FIXED_PARAMS, "repetition_penalty", 1.5)
    prompt = tuple(engine.chat_prompt("Repeat the word cat ten times."))
    req = Request(prompt, 16, 1.0, 5)
    (comp,) = engine.generate([req])
    assert_unprocessed(hf_model, req, comp, check_logq=False)
    monkeypatch.setitem(http._FIXED_PARAMS, "repetition_penalty", 1.0)
    (plain,) = engine.generate([req])
    assert plain.tokens != comp.tokens  # the penalty did change the draws (same seed)


# -- the embedded engine by hub id -----------------------------------------------------------------
@pytest.mark.slow
def test_embedded_by_hub_id_is_the_named_model(model_folder, tmp_path):
    """``--model HuggingFaceTB/SmolLM2-135M-Instruct`` from an offline cache runs the chain
    of ``--model smollm2`` token for token (same weights, same keys); an id not cached is a
    clear error naming --model."""
    hf_home = tmp_path / "hf"
    build_cache(model_folder, hf_home, generation_config=PENALIZED)
    runs = {}
    for model in (SMOLLM2_ID, "smollm2"):
        trace = tmp_path / f"{model.replace('/', '_')}.jsonl"
        out = _cli([*SAMPLE, "--model", model, "--trace", str(trace)], hf_home)
        assert out.returncode == 0, out.stderr
        runs[model] = [r for r in map(json.loads, trace.read_text().splitlines()) if r.get("type") == "summary"]
    assert runs[SMOLLM2_ID] and [r.get("tokens") for r in runs[SMOLLM2_ID]] == [
        r.get("tokens") for r in runs["smollm2"]
    ]
    missing = _cli([*SAMPLE, "--model", "Org/not-cached"], hf_home)
    assert missing.returncode == 2 and "--model" in missing.stderr and "HF_HUB_OFFLINE" in missing.stderr
