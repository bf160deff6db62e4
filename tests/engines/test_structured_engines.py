"""Structured power sampling on a real model in process (the embedded engine on the trained
tiny-adder, a character-level Llama with its own Hugging Face tokenizer): masked draws against
a masked float32 forward, responses against Python's ``re``, PreSTO against sequential."""

from __future__ import annotations

import re

import pytest

from presto_sgl import PowerConfig, Sampler, sampling_configs
from presto_sgl.config import Target
from presto_sgl.constraints import Constraint
from presto_sgl.engines.base import Request
from presto_sgl.errors import ConfigError
from tests.support.structured import masked_forward

STEPS = r"([0-9]\+[0-9]\+[0-9]=[0-9][0-9];)+A:[0-9]+"
"""The tiny adder's worked-step format (presto_sgl/assets/tiny-adder/README.md)."""
ODD = r"([0-9]\+[0-9]\+[0-9]=[0-9][0-9];)+A:[0-9]*[13579]"
"""...ending in an odd digit: a constraint the model does not follow by itself."""


def constrained(rule: str, constraint: Constraint, **options) -> tuple[PowerConfig, object]:
    cfg, presto = sampling_configs(rule, ending="eos", **options)
    target = cfg.target
    return PowerConfig(
        Target(target.alpha, target.max_new_tokens, target.block_size, target.ending, constraint=constraint), cfg.kernel
    ), presto


@pytest.mark.parametrize("pattern", [STEPS, ODD])
def test_masked_draws_equal_a_masked_full_forward(tiny_engine, tiny_adder, pattern):
    model, tok = tiny_adder
    prompt = tuple(tok.encode("Q:47+385="))
    c, stop = Constraint(regex=pattern), tiny_engine.text.stop_ids
    (first,) = tiny_engine.generate([Request(prompt, 48, 1.0, 1, stop=stop, constraint=c)])
    k = 7
    reqs = [
        Request(prompt + first.tokens[:k], 40, tau, seed, stop=stop, constraint=c, resume=k)
        for tau, seed in ((1.0, 2), (0.5, 3), (0.25, 4))
    ]
    for req, comp in zip(reqs, tiny_engine.generate(reqs)):
        lq, lp, _ = masked_forward(model, tok, c, req.prefix, k, comp.tokens, req.temperature, stop)
        assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < 1e-4
        assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < 1e-4
        response = first.tokens[:k] + comp.tokens
        assert response[-1] in stop, "the tiny adder ends its answer"
        assert re.fullmatch(pattern, tok.decode(response[:-1]))


def test_presto_under_a_constraint_is_the_sequential_chain(tiny_engine):
    """Each PreSTO rule visits the states of the sequential chain with its keys (tau > 1/alpha:
    the tiny model is nearly deterministic, so at 1/alpha almost every proposal is accepted)."""
    from tests.support.coupling import assert_same_states, run_states

    prompt = tuple(tiny_engine.text.encode("Q:58+67="))
    options = {"alpha": 4.0, "tau": 2.0, "max_new_tokens": 48, "block_size": 16, "steps": 4}
    for rule, keying in (("step", "step"), ("bfs", "path")):
        seq_cfg, seq_presto = constrained("sequential", Constraint(regex=ODD), keying=keying, **options)
        seq, seq_result = run_states(Sampler(tiny_engine, seq_cfg, seq_presto), prompt, 3)
        assert len(seq) == 12 and {acc for *_, acc in seq} == {True, False}
        cfg, presto = constrained(rule, Constraint(regex=ODD), **options)
        states, result = run_states(Sampler(tiny_engine, cfg, presto), prompt, 3)
        assert_same_states(seq, states, 1e-4)  # float32 batch numerics (batched rows vs single rows)
        assert result.metrics.model_calls < seq_result.metrics.model_calls
        tokens = result.state.tokens
        assert tokens[-1] in tiny_engine.text.stop_ids
        assert re.fullmatch(ODD, tiny_engine.text.decode(tokens[:-1]))


def test_min_tokens_holds_the_stop_token_back(tiny_engine):
    prompt = tuple(tiny_engine.text.encode("Q:1+2="))
    stop = tiny_engine.text.stop_ids
    plain = tiny_engine.generate([Request(prompt, 40, 1.0, 5, stop=stop)])[0]
    assert plain.tokens[-1] in stop and len(plain.tokens) < 20  # the answer ends early by itself
    cfg, presto = constrained("step", Constraint(min_tokens=20), alpha=4.0, max_new_tokens=32, block_size=16, steps=2)
    result = Sampler(tiny_engine, cfg, presto).run(prompt, seed=5)
    assert len(result.state.tokens) > 20 or result.state.tokens[-1] not in stop
    assert all(t not in stop for t in result.state.tokens[:20])


def test_a_constraint_needs_the_eos_target():
    with pytest.raises(ConfigError, match="ending='eos'"):
        Target(4.0, 32, 16, "fixed", constraint=Constraint(regex="[0-9]+"))
