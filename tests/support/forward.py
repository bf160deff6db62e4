"""The transformers fp32 forward that SGLang results are checked against (the HTTP server
tests, the in-process / ``power_gen`` tests and benchmarks/load.py share it).

``torch`` is imported inside the helpers: importing this module needs neither torch nor sglang.
"""

from __future__ import annotations

from collections.abc import Sequence

TOL = 2e-3  # fp32 SGLang vs fp32 transformers forward, per token (different kernels)


def reference(model, prefix: Sequence[int], tokens: Sequence[int], tau: float) -> tuple[list[float], list[float]]:
    """Per-token (log q_tau, log p0) of ``tokens`` after ``prefix`` from one full forward pass of ``model``."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([list(prefix) + list(tokens)])).logits[0].float()
    rows = logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]
    idx = torch.tensor(list(tokens))[:, None]
    logq = torch.log_softmax(rows / tau, -1).gather(1, idx)[:, 0].tolist()
    logp = torch.log_softmax(rows, -1).gather(1, idx)[:, 0].tolist()
    return logq, logp


def assert_matches_forward(engine, hf_model) -> list:
    """Three requests (different prefixes and taus) scored by ``engine`` agree with
    :func:`reference` within TOL; returns the completions."""
    from presto_sgl.engines.base import Request

    prompt = tuple(engine.chat_prompt("What is 17 + 25?"))
    reqs = [Request(prompt, 12, 0.25), Request(prompt[:-3], 8, 1.0), Request(prompt, 6, 0.5)]
    comps = engine.generate(reqs)
    for req, comp in zip(reqs, comps):
        assert len(comp.tokens) == req.max_new_tokens
        lq, lp = reference(hf_model, req.prefix, comp.tokens, req.temperature)
        assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL / req.temperature
        assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
    return comps


def assert_scored_exactly(model, state, tau: float) -> None:
    """The state's per-token log q_tau and log p0 match a fresh forward pass of its final tokens."""
    lq, lp = reference(model, state.prompt, state.tokens, tau)
    assert max(abs(a - b) for a, b in zip(lp, state.logp)) < TOL
    assert max(abs(a - b) for a, b in zip(lq, state.logq)) < TOL / tau


def assert_scores_match(model, prefix: Sequence[int], tokens: Sequence[int], logp: Sequence[float]) -> None:
    """``logp`` is the fp32 forward's log p0 of exactly ``tokens`` after exactly ``prefix``."""
    _, ref = reference(model, prefix, tokens, 1.0)
    assert len(ref) == len(logp) == len(tokens)
    assert max(abs(a - b) for a, b in zip(ref, logp)) < TOL


def assert_extras_match(
    model, prefix: Sequence[int], tokens: Sequence[int], logq_at=None, temperatures=(), entropy=None
) -> None:
    """Per-token log q at each of ``temperatures`` (``logq_at[t][i]``) and the p0 entropy match a
    fresh fp32 forward of exactly ``tokens`` after exactly ``prefix``."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([list(prefix) + list(tokens)])).logits[0].float()
    rows = logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]
    idx = torch.tensor(list(tokens))[:, None]
    if logq_at is not None:
        assert len(logq_at) == len(tokens)
        for i, t in enumerate(temperatures):
            ref = torch.log_softmax(rows / t, -1).gather(1, idx)[:, 0].tolist()
            assert max(abs(a - row[i]) for a, row in zip(ref, logq_at)) < TOL / t
    if entropy is not None:
        logp = torch.log_softmax(rows, -1)
        ref = (-(logp.exp() * logp).sum(-1)).tolist()
        assert len(entropy) == len(tokens) and max(abs(a - b) for a, b in zip(ref, entropy)) < TOL
