"""SGLang in this process: the in-process ``sglang.Engine`` engine and ``power_gen`` programs.

Needs an interpreter where sglang imports (``.venv-sglang``): ``bash scripts/test.sh``
runs this file a second time with ``.venv-sglang/bin/python -m pytest``; the main
``.venv`` run only checks that the errors without sglang name the fix, and skips the
rest. The in-process tests start one fp32 engine (SmolLM2; 1-2 min on 2 busy cores);
the ``power_gen`` tests run ``@sgl.function`` programs against the server at
PRESTO_SGL_SGLANG_URL (an fp32 server with the presto_raw_logprob plugin). A missing
server or model skips, except under PRESTO_SGL_REQUIRE_SGLANG=1 (CI), where it fails —
as does a .venv-sglang interpreter that cannot import sglang.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import pytest

from presto_sgl import Sampler
from presto_sgl.testing.forward import (  # the transformers fp32 forward
    TOL,
    assert_extras_match,
    assert_matches_forward,
    assert_scores_match,
)

pytestmark = pytest.mark.sglang

URL = os.environ.get("PRESTO_SGL_SGLANG_URL")
REQUIRED = os.environ.get("PRESTO_SGL_REQUIRE_SGLANG") == "1"

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


def missing(what: str) -> None:
    if REQUIRED:
        pytest.fail(f"PRESTO_SGL_REQUIRE_SGLANG=1 but {what}")
    pytest.skip(what)


@pytest.fixture(scope="module")
def sglang_ready() -> None:
    if HAVE_SGLANG:
        return
    if REQUIRED and Path(sys.prefix).name == ".venv-sglang":
        pytest.fail(f"PRESTO_SGL_REQUIRE_SGLANG=1 but {sys.executable} cannot import sglang; run bash scripts/install_sglang.sh")
    pytest.skip(f"sglang is not importable by {sys.executable}; scripts/test.sh runs this file with .venv-sglang/bin/python")


@pytest.fixture(scope="module")
def model_path(sglang_ready) -> Path:
    from presto_sgl.models import materialize_smollm2

    try:
        return materialize_smollm2()
    except FileNotFoundError as exc:
        missing(f"SmolLM2 is not materialized ({exc})")


@pytest.fixture(scope="module")
def hf_model(model_path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


# -- the in-process engine -------------------------------------------------------------------------
class TestInProcessEngine:
    @pytest.fixture(scope="class")
    def engine(self, model_path):
        from presto_sgl.engines.sglang.inproc import SGLangInProcessEngine

        t0 = time.perf_counter()
        with SGLangInProcessEngine(model_path, dtype="float32", max_total_tokens=4096) as eng:
            print(f"in-process sglang.Engine ready in {time.perf_counter() - t0:.1f} s ({eng.mode})")
            yield eng

    def test_logprobs_match_a_full_forward(self, engine, hf_model):
        assert engine.mode == "one-pass"  # the presto_raw_logprob plugin runs in the scheduler subprocess
        assert_matches_forward(engine, hf_model)

    def test_entropy_and_server_facts(self, engine, hf_model):
        import torch

        from presto_sgl.engines.base import Request

        prompt = tuple(engine.chat_prompt("Name a colour."))
        (comp,) = engine.generate([Request(prompt, 5, 0.5, return_entropy=True)])
        with torch.no_grad():
            logits = hf_model(torch.tensor([list(prompt) + list(comp.tokens)])).logits[0].float()
        rows = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + 5], -1)
        ref = (-(rows.exp() * rows).sum(-1)).tolist()
        assert max(abs(a - b) for a, b in zip(ref, comp.entropy)) < TOL
        assert engine.server_info()["max_total_num_tokens"] == 4096
        (load,) = engine.server_loads()
        assert "num_used_tokens" in load and "cache_hit_rate" in load
        assert engine.stats.calls >= 1 and engine.stats.cached_tokens > 0

    def test_sequential_and_presto(self, engine):
        from presto_sgl import PowerConfig, PrestoConfig

        cfg = PowerConfig(alpha=4.0, max_new_tokens=8, block_size=8, steps=4, keying="step")
        prompt = engine.chat_prompt("Name a prime number.")
        seq = Sampler(engine, cfg, PrestoConfig("sequential")).run(prompt, seed=1)
        pre = Sampler(engine, cfg, PrestoConfig("step", budget=4)).run(prompt, seed=1)
        assert seq.metrics.transitions == pre.metrics.transitions == 4
        assert pre.metrics.model_calls < seq.metrics.model_calls == 4
        assert pre.metrics.cached_tokens > 0
        assert len(seq.state.tokens) == len(pre.state.tokens) == 8

    @pytest.mark.parametrize("sampler", ["entropycut", "multitry"])
    def test_paper_samplers(self, engine, hf_model, sampler):
        """The plugin in the scheduler subprocess returns entropy and log q at the score
        temperatures: both samplers run in process, their states scored like a fresh forward."""
        from presto_sgl import sampling_configs

        temps = (0.25, 0.5, 1.0)
        assert engine.capabilities.scores_at(temps)
        cfg, presto = sampling_configs("step", budget=3, alpha=4.0, max_new_tokens=8, block_size=8, steps=3, kernel=sampler)
        st = Sampler(engine, cfg, presto).run(engine.chat_prompt("Name a prime number."), seed=1).state
        assert_scores_match(hf_model, st.prompt, st.tokens, st.logp)
        assert_extras_match(hf_model, st.prompt, st.tokens, st.logq_at, temps, st.entropy)


# -- power_gen in @sgl.function programs ------------------------------------------------------------
@pytest.fixture(scope="module")
def backend(sglang_ready):
    if not URL:
        missing("PRESTO_SGL_SGLANG_URL is not set (no SGLang server for the power_gen programs)")
    import sglang as sgl

    return sgl.RuntimeEndpoint(URL)


def test_power_gen_in_a_chat_program(backend, hf_model, tokenizer):
    import sglang as sgl

    from presto_sgl.frontend import power_gen

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant_begin()
        s["prompt_text"] = s.text()
        power_gen(s, "answer", max_new_tokens=8, block_size=8, steps=3, seed=1)
        s += sgl.assistant_end()

    state = qa.run(question="What is 17 + 25?", backend=backend)
    meta = state.get_meta_info("answer")
    answer = state["answer"]
    assert meta["prompt_source"] == "text"
    assert meta["prompt_ids"] == tokenizer(state["prompt_text"])["input_ids"]  # the program text, tokenized once
    assert state.text().startswith(state["prompt_text"] + answer)
    assert len(meta["output_ids"]) == 8 and meta["transitions"] == 3 and meta["model_calls"] < 3
    eos = meta["eos_index"]
    assert answer == tokenizer.decode(meta["output_ids"][:eos])
    assert math.isclose(meta["log_p0"], math.fsum(meta["output_token_logp"]))
    assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])
    assert state.messages()[-1] == {"role": "assistant", "content": answer.lstrip()}


def test_power_gen_keeps_exact_ids_where_a_text_round_trip_changes_them(backend, hf_model, tokenizer):
    """After "猫"*8 SmolLM2 starts another 3-byte character: 'ç' (0xE7) or 'ï¼' (0xEF 0xBC).

    At tau = 1/8 every other token is e^-26 less likely, so the one-token answer is a
    partial UTF-8 character: its text is U+FFFD, which re-encodes to another id. The
    next power_gen must start from the chain's id, not from the re-encoded text.
    """
    import sglang as sgl

    from presto_sgl.frontend import power_gen

    @sgl.function
    def cats(s):
        s += "猫" * 8
        power_gen(s, "a", max_new_tokens=1, block_size=1, steps=2, alpha=8.0, seed=3)
        power_gen(s, "b", max_new_tokens=4, block_size=4, steps=2, alpha=8.0, seed=4)

    state = cats.run(backend=backend)
    a, b = state.get_meta_info("a"), state.get_meta_info("b")
    assert a["prompt_source"] == "text" and a["prompt_ids"] == tokenizer("猫" * 8)["input_ids"]
    assert state["a"] == "\ufffd" == tokenizer.decode(a["output_ids"])
    assert tokenizer.encode(state["a"], add_special_tokens=False) != a["output_ids"]  # the round trip changes ids
    assert state.text() == "猫" * 8 + state["a"] + state["b"]
    # The second chain continues from the exact ids, not from re-encoding the program text.
    assert b["prompt_source"] == "ids" and b["prompt_ids"] == a["prompt_ids"] + a["output_ids"]
    assert tokenizer(state.text()[: -len(state["b"]) or None])["input_ids"] != b["prompt_ids"]
    for meta in (a, b):  # log p0 of exactly those ids, scored afresh
        assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])
        assert math.isclose(meta["log_p0"], math.fsum(meta["output_token_logp"]))


def test_power_gen_on_forks_runs_one_chain_each(backend):
    import sglang as sgl

    from presto_sgl.frontend import power_gen

    @sgl.function
    def three(s):
        s += sgl.user("Name a prime number.")
        s += sgl.assistant_begin()
        forks = s.fork(3)
        power_gen(forks, "answer", max_new_tokens=8, block_size=8, steps=2, seed=5)
        return [(f["answer"], f.get_meta_info("answer"), f.text()) for f in forks]

    state = three.run(backend=backend)
    chains = state.ret_value
    assert [m["chain_id"] for _, m, _ in chains] == [0, 1, 2]
    assert len({tuple(m["prompt_ids"]) for _, m, _ in chains}) == 1  # one shared prompt prefix
    for answer, meta, text in chains:
        assert len(meta["output_ids"]) == 8 and meta["transitions"] == 2
        assert meta["cached_tokens"] > 0  # the prefix comes from the server's radix cache
        assert text.endswith(answer)


def test_power_gen_runs_the_papers_samplers(backend, hf_model):
    """``power_gen(method=...)``: MultiTryMH and EntropyCut in a program, recorded in the meta info."""
    import sglang as sgl

    from presto_sgl.frontend import power_gen

    @sgl.function
    def qa(s, sampler):
        s += sgl.user("Name a prime number.")
        s += sgl.assistant_begin()
        extra = {"tries": 3} if sampler == "multitry" else {}  # a kernel's own parameter goes with its kernel
        power_gen(s, "answer", max_new_tokens=8, block_size=8, steps=2, seed=3, method=sampler, **extra)

    for sampler in ("multitry", "entropycut"):
        meta = qa.run(sampler=sampler, backend=backend).get_meta_info("answer")
        assert meta["config"]["method"] == sampler and meta["transitions"] == 2
        if sampler == "multitry":
            assert meta["config"]["tries"] == 3
        assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])


def test_power_gen_errors_name_the_argument(backend):
    import sglang as sgl

    from presto_sgl.frontend import power_gen

    @sgl.function
    def bad(s, **kwargs):
        s += "Hello"
        power_gen(s, "x", **{"max_new_tokens": 4, "block_size": 4, "steps": 1, **kwargs})

    with pytest.raises(ValueError, match="`rule` \\(='nope'\\)"):
        bad.run(rule="nope", backend=backend)
    with pytest.raises(ValueError, match="`max_new_tokens`"):
        bad.run(block_size=3, backend=backend)
    with pytest.raises(ValueError, match=r"`tries` \(=0\)"):
        bad.run(method="multitry", tries=0, backend=backend)
    with pytest.raises(ValueError, match="`beta` is a parameter of entropycut"):
        bad.run(beta=2.0, backend=backend)

    @sgl.function
    def empty(s):
        power_gen(s, "x", max_new_tokens=4, block_size=4, steps=1)

    with pytest.raises(ValueError, match="program text before"):
        empty.run(backend=backend)


# -- without sglang ---------------------------------------------------------------------------------
@pytest.mark.skipif(HAVE_SGLANG, reason="checks the errors raised where sglang is not importable")
def test_without_sglang_the_errors_name_the_fix(tmp_path):
    from presto_sgl.engines.sglang.inproc import SGLangInProcessEngine
    from presto_sgl.frontend import power_gen

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ImportError, match=r"run from \.venv-sglang .*bash scripts/install_sglang\.sh"):
        SGLangInProcessEngine(tmp_path)
    with pytest.raises(ImportError, match=r"run from \.venv-sglang"):
        power_gen(object(), "answer")
    with pytest.raises(ValueError, match="`model_path`"):
        SGLangInProcessEngine(tmp_path / "nowhere")
