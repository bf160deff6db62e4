"""``power_gen`` in an ``@sgl.function`` program of a base model: Gemma 3 on its own SGLang server
(tier 4, marker ``gemma3``; ``scripts/test.sh`` runs this file with ``.venv-sglang``'s python)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from tests.integration.test_gemma3 import gemma3_server
from tests.support.forward import assert_scores_match

pytestmark = [pytest.mark.server, pytest.mark.gemma3]

CHAIN = dict(block_size=8, steps=2)


def test_a_base_model_program_on_a_gemma3_server():
    """Gemma 3 (a base model: no chat template, ``<bos>`` required) on its own SGLang server: a
    few-shot program whose text power_gen tokenizes once, ``<bos>`` first as the server does, a
    ``dtype=int`` answer and a free one, each scored as Gemma's float32 forward scores it."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip(f"sglang is not importable by {sys.executable}; scripts/test.sh runs this file with .venv-sglang")
    url = gemma3_server("PRESTO_SGL_GEMMA3_SGLANG_URL")
    import sglang as sgl
    import torch
    from transformers import AutoModelForCausalLM

    from presto_sgl.models import materialize_gemma3
    from presto_sgl.program import power_gen

    @sgl.function
    def fewshot(s):
        s += "Q: What is 12 + 30?\nA: 42\n\nQ: What is 25 + 17?\nA:"
        s += power_gen("sum", max_tokens=4, dtype=int, seed=1, **CHAIN)
        s += "\n\nQ: What is the capital of France?\nA:"
        s += power_gen("city", max_tokens=8, stop="\n", seed=2, **CHAIN)

    state = fewshot.run(backend=sgl.RuntimeEndpoint(url))
    assert state.error() is None, state.error()
    assert re.fullmatch(r"[-+]?[0-9]+[ \n]*", state["sum"]), state["sum"]
    model = AutoModelForCausalLM.from_pretrained(materialize_gemma3(), dtype=torch.float32).eval()
    for name in ("sum", "city"):
        meta = state.get_meta_info(name)
        assert meta["prompt_ids"][0] == 2 and meta["prompt_ids"].count(2) == 1  # one <bos>, first
        assert_scores_match(model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])
    assert "\n" not in state["city"]
