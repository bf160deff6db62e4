"""SGLang in this process: the in-process ``sglang.Engine`` engine (``power_gen`` programs:
test_power_gen_programs.py).

Needs an interpreter where sglang imports (``.venv-sglang``): ``bash scripts/test.sh``
runs this file a second time with ``.venv-sglang/bin/python -m pytest``; the main
``.venv`` run only checks that the errors without sglang name the fix, and skips the
rest. The in-process tests start one fp32 engine (SmolLM2; 1-2 min on 2 busy cores). A
missing model skips, except under PRESTO_SGL_REQUIRE_SGLANG=1 (CI), where it fails — as
does a .venv-sglang interpreter that cannot import sglang.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

from presto_sgl import Sampler
from tests.support.forward import (  # the transformers fp32 forward
    TOL,
    assert_extras_match,
    assert_matches_forward,
    assert_scores_match,
)

pytestmark = pytest.mark.sglang

REQUIRED = os.environ.get("PRESTO_SGL_REQUIRE_SGLANG") == "1"

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


def missing(what: str) -> NoReturn:
    if REQUIRED:
        pytest.fail(f"PRESTO_SGL_REQUIRE_SGLANG=1 but {what}")
    pytest.skip(what)


@pytest.fixture(scope="module")
def sglang_ready() -> None:
    if HAVE_SGLANG:
        return
    if REQUIRED and Path(sys.prefix).name == ".venv-sglang":
        pytest.fail(
            f"PRESTO_SGL_REQUIRE_SGLANG=1 but {sys.executable} cannot import sglang; run bash scripts/install_sglang.sh"
        )
    pytest.skip(
        f"sglang is not importable by {sys.executable}; scripts/test.sh runs this file with .venv-sglang/bin/python"
    )


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
        from presto_sgl import KernelConfig, PowerConfig, PrestoConfig, Target

        cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=8), KernelConfig(steps=4))
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
        cfg, presto = sampling_configs(
            "step", budget=3, alpha=4.0, max_new_tokens=8, block_size=8, steps=3, method=sampler
        )
        st = Sampler(engine, cfg, presto).run(engine.chat_prompt("Name a prime number."), seed=1).state
        assert_scores_match(hf_model, st.prompt, st.tokens, st.logp)
        assert_extras_match(hf_model, st.prompt, st.tokens, st.logq_at, temps, st.entropy)


# -- without sglang ---------------------------------------------------------------------------------
@pytest.mark.skipif(HAVE_SGLANG, reason="checks the errors raised where sglang is not importable")
def test_without_sglang_the_errors_name_the_fix(tmp_path):
    from presto_sgl.engines.sglang.inproc import SGLangInProcessEngine
    from presto_sgl.program import power_gen

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ImportError, match=r"run from \.venv-sglang .*bash scripts/install_sglang\.sh"):
        SGLangInProcessEngine(tmp_path)
    with pytest.raises(ImportError, match=r"run from \.venv-sglang"):
        power_gen("answer")
    with pytest.raises(ValueError, match="`model_path`"):
        SGLangInProcessEngine(tmp_path / "nowhere")
