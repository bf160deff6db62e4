"""Running a sampler transition by transition and comparing two runs' states: the coupling
tests (tests/exactness/test_coupling.py) and the real-vLLM coupling test share them."""

from __future__ import annotations

COUPLING_STOP = 0
"""The stop token of the eos coupling chains (reference LM: vocab 12, sharpness 2, seed 3)."""
COUPLING_SCHEDULES = {2: (16, 8, 6), 20: (30, 10, 25)}
"""Under the eos target, budget -> (n, B, K): a small budget on a short schedule, the full one on
the longest (test_coupling.py's eos grid; test_ending_target.py's guards and resume)."""


def run_states(sampler, prompt, seed, **run_options):
    """(transitions as (stage, k, state, accepted), result) of one chain; ``run_options`` go to
    ``sampler.run`` (e.g. ``prompt_id``)."""
    seen = []
    result = sampler.run(
        prompt,
        seed=seed,
        on_transition=lambda stage, k, st, tr: seen.append((stage, k, st, tr.accepted)),
        **run_options,
    )
    return seen, result


def assert_same_states(seq, pre, tol: float) -> None:
    """(stage, k, ChainState incl. logq/logp, accepted) identical; log-probs within ``tol`` if > 0."""
    if tol == 0.0:
        for a, b in zip(seq, pre):
            assert a == b
        return
    for (s1, k1, a, acc1), (s2, k2, b, acc2) in zip(seq, pre):
        assert (s1, k1, acc1, a.prompt, a.tokens) == (s2, k2, acc2, b.prompt, b.tokens)
        assert max(abs(x - y) for x, y in zip(a.logq + a.logp, b.logq + b.logp)) <= tol
