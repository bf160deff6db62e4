"""The EOS-terminated target on a real server (the SGLang and vLLM integration tests share it)."""

from __future__ import annotations

from presto_sgl import Sampler, sampling_configs
from presto_sgl.engines.base import Request
from tests.support.forward import assert_scores_match


def check_eos_target(engine, hf_model, entropy: bool) -> None:
    """A request ends at the model's first stop token, which comes back with its values (log p0
    as a fresh fp32 forward gives them); sequential and the step rule run K transitions over
    states that end, PreSTO in fewer calls."""
    stop = engine.text.stop_ids
    assert engine.capabilities.stops and stop
    prompt = tuple(engine.chat_prompt("What is 2 + 3? Reply with the number only."))
    comps = engine.generate(
        [
            Request(prompt, 48, 0.25, None, return_entropy=entropy, score_temperatures=(), route=None, stop=stop)
            for _ in range(4)
        ]
    )
    ended = [c for c in comps if c.tokens[-1] in stop]
    seen = [(len(c.tokens), c.tokens[-3:]) for c in comps]
    assert ended and all(len(c.tokens) < 48 for c in ended), f"no draw ended at a stop token {stop}: {seen}"
    for c in comps:
        assert all(t not in stop for t in c.tokens[:-1])
        assert_scores_match(hf_model, prompt, c.tokens, c.logp)
    results = {}
    for rule in ("sequential", "step"):
        cfg, presto = sampling_configs(
            rule, budget=4, alpha=4.0, max_new_tokens=48, block_size=24, steps=4, ending="eos"
        )
        results[rule] = Sampler(engine, cfg, presto).run(prompt, seed=1)
    for r in results.values():
        st = r.state
        assert r.metrics.transitions == 8 and (st.tokens[-1] in stop or len(st.tokens) == 48)
        assert_scores_match(hf_model, st.prompt, st.tokens, st.logp)
    assert results["step"].metrics.model_calls < results["sequential"].metrics.model_calls == 8
