"""Power sampling over a finite set: pi(c) ∝ p0(c | x)^alpha over the given choices, exactly.

Each choice c_i is a token sequence appended to the prompt x; one scoring pass gives
log p0(c_i | x) = sum_t log p0(c_i,t | x, c_i,<t) for every choice, and the draw is the inverse
CDF of pi at one keyed uniform (:func:`~presto_sgl.chain.keys.uniform01` of the chain's seed
and id): no MCMC, so no chain to mix, and the same keys give the same choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..chain.keys import hash64, uniform01
from ..engines.scoring import Scorer


@dataclass(frozen=True)
class ChoiceDraw:
    """A drawn choice: its ``index``, and per choice log p0(c_i | x) and pi(c_i)."""

    index: int
    logp: tuple[float, ...]
    probs: tuple[float, ...]


def power_probs(logp: Sequence[float], alpha: float) -> tuple[float, ...]:
    """pi_i = exp(alpha * logp_i) / sum_j exp(alpha * logp_j), computed in logs."""
    scaled = [alpha * v for v in logp]
    top = max(scaled)
    weights = [math.exp(v - top) for v in scaled]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def draw_choice(
    engine: Scorer,
    prompt: Sequence[int],
    choices: Sequence[Sequence[int]],
    alpha: float,
    *,
    seed: int,
    prompt_id: int | str = 0,
) -> ChoiceDraw:
    """Draw one of ``choices`` (token sequences, each non-empty) after ``prompt`` from
    pi(c) ∝ p0(c | prompt)^alpha, scoring every choice in one engine call."""
    if not prompt:
        raise ValueError("the prompt is empty: p0(c | x) needs at least one token of context")
    if not choices or any(len(c) == 0 for c in choices):
        raise ValueError("each choice must be a non-empty token sequence")
    scored = engine.score_tokens([(*prompt, *c) for c in choices], 0)
    n = len(prompt)
    logp = tuple(math.fsum(float(v) for v in s.logp[n:] if v is not None) for s in scored)
    probs = power_probs(logp, alpha)
    u = uniform01(hash64("choice", seed, prompt_id))
    total, index = 0.0, max(i for i, p in enumerate(probs) if p > 0)  # the last: should rounding leave u above the sum
    for i, p in enumerate(probs):
        total += p
        if u <= total:
            index = i
            break
    return ChoiceDraw(index, logp, probs)
