"""The settings an operator of a shared SGLang server runs, on a real server: the one-pass exactness
probe passes under them, and a chain and a grammar's resume come through retraction intact.

The session's spare server (``spare_sglang_url``; :data:`~tests.integration.conftest.SPARE_OPTIONS`):
prefill chunks of 64 mixed into decode batches, no radix cache, ``--schedule-policy fcfs``, a
2048-token pool, and a running request retracted every third decode step (``--test-retract``:
SGLang's own SGLANG_TEST_RETRACT; this SGLang's admission keeps its running set inside a small
pool, so memory pressure alone did not retract here). The chains of
``test_sglang_load.py::test_chains_in_flight_survive_a_killed_server`` run on it too, every state
checked against an fp32 forward. vLLM's counterpart: ``test_vllm_settings.py``.
"""

from __future__ import annotations

import re

import pytest

from tests.support.forward import assert_matches_forward
from tests.support.servers import ROOT
from tests.support.structured import (
    QUESTION,
    assert_chain_masked,
    assert_resumed_json_masked,
    person_config,
    resumed_json_requests,
)

pytestmark = pytest.mark.sglang


def _retractions(url: str) -> int:
    """Requests the SGLang server on ``url`` retracted so far (its log, scripts/sglang_server.sh)."""
    log = ROOT / ".cache" / "sglang" / f"server-{url.rsplit(':', 1)[1]}.log"
    return sum(int(n) for n in re.findall(r"#retracted_reqs: (\d+)", log.read_text(errors="replace")))


def test_sglang_settings_keep_one_pass_exact_under_retraction(spare_sglang_url, hf_model):
    """On the spare server: the one-pass probe; two draws resumed inside a JSON object, the only
    requests on the server, one of them retracted and re-prefilled mid-answer (it keeps its advanced
    grammar: masked log q as a masked fp32 forward's); and a PowerMH chain under the schema by the
    step rule, its requests retracted too (its whole state as a masked forward scores it, the answer
    validates)."""
    from presto_sgl import Sampler
    from presto_sgl.engines.sglang.http import SGLangEngine

    engine = SGLangEngine(spare_sglang_url)
    info = engine.server_info()
    assert engine.mode == "one-pass"
    assert (info["chunked_prefill_size"], info["disable_radix_cache"], info["schedule_policy"]) == (64, True, "fcfs")
    assert_matches_forward(engine, hf_model)
    reqs = resumed_json_requests(engine)
    before = _retractions(spare_sglang_url)
    assert_resumed_json_masked(engine, hf_model, reqs, engine.generate(reqs))
    after = _retractions(spare_sglang_url)
    assert after > before
    result = Sampler(engine, *person_config("step")).run(tuple(engine.chat_prompt(QUESTION)), seed=3)
    assert result.metrics.transitions == 12
    assert_chain_masked(engine, hf_model, result)
    assert _retractions(spare_sglang_url) > after
