"""Scoring token sequences under p0 in one pass (no sampling): what ``echo`` with ``logprobs``
asks of an OpenAI endpoint, and what evaluation harnesses use for loglikelihood tasks.

An engine that can score has ``score_tokens(sequences, top)``: for each sequence x_{0:n},
log p0(x_t | x_{<t}) for t >= 1 and the ``top`` most likely tokens at every position
1..n, position n being the next token after the sequence (its first entry the greedy one).
It is an optional capability beside the sampling protocol (:mod:`.base`), which it does
not touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import CapabilityError


@dataclass(frozen=True)
class Scored:
    """One scored sequence of n tokens: ``logp[t]`` = log p0(x_t | x_{<t}) (``logp[0]`` is None:
    the first token has no context); ``top[t]`` = the (id, log p0) pairs of the most likely
    tokens at position t, most likely first, for t = 0..n (``top[0]`` empty; ``top[n]`` is the
    distribution after the sequence)."""

    logp: tuple[float | None, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    entropy: tuple[float | None, ...] | None = None  # H(p0( . | x_{<t})) per token as logp; None: not given

    @property
    def next_token(self) -> tuple[int, float]:
        """The greedy next token after the sequence and its log p0."""
        return self.top[-1][0]


@runtime_checkable
class Scorer(Protocol):
    def score_tokens(self, sequences: Sequence[Sequence[int]], top: int) -> list[Scored]: ...


def scorer(engine: Any) -> Scorer:
    """``engine`` as a :class:`Scorer`; CapabilityError if it cannot score."""
    if not isinstance(engine, Scorer):
        raise CapabilityError(
            f"the {type(engine).__name__} backend cannot score prompts (echo with logprobs); "
            "the reference, embedded, SGLang and vLLM engines can"
        )
    return engine


def check_top(top: int) -> int:
    """At least one alternative: the greedy next token is the top one."""
    return max(1, int(top))


def from_logp_rows(ids: Sequence[int], rows: np.ndarray, top: int) -> Scored:
    """A :class:`Scored` from ``rows[t]`` = log p0 of the next token after x_{0:t}, t = 0..n-1
    (row t scores x_{t+1}; row n-1 is the distribution after the sequence), with entropies."""
    k = check_top(top)
    n = len(ids)
    logp: list[float | None] = [None] + [float(rows[t - 1, ids[t]]) for t in range(1, n)]
    k = min(k, rows.shape[1])
    best = np.argpartition(-rows, k - 1, axis=1)[:, :k]  # the k largest per row, then only those sorted
    order = np.take_along_axis(best, np.argsort(-np.take_along_axis(rows, best, axis=1), axis=1, kind="stable"), axis=1)
    tops = [()] + [tuple((int(j), float(rows[t, j])) for j in order[t]) for t in range(n)]
    entropy = -(np.exp(rows) * rows).sum(axis=1)  # row t: the entropy at position t + 1
    return Scored(tuple(logp), tuple(tops), (None, *(float(h) for h in entropy[: n - 1])))
