"""Running a sampler transition by transition and comparing two runs' states: the coupling
tests (tests/exactness/test_coupling.py) and the real-vLLM coupling test share them."""

from __future__ import annotations


def run_states(sampler, prompt, seed):
    seen = []
    result = sampler.run(
        prompt, seed=seed, on_transition=lambda stage, k, st, tr: seen.append((stage, k, st, tr.accepted))
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
