"""The call-time model of the cost-aware planner: t = theta . (1, rows, steps, tokens, batched).

Forks decode in lockstep, so a call lasts max(new tokens) decode steps, and each step
costs more with more active rows (total decoded tokens). ``batched`` counts the steps
in which at least two rows decode (the second most new tokens): servers decode a batch
of one on a faster path (the CPU SGLang server: ~0.09 s per step alone, 0.13-0.17 s
with 2-4 rows, benchmarks/RESULTS.md), a jump that a model linear in rows and tokens
prices too high for one row and too low for a few. One model is shared by every run of
a sampler (calls of any chain teach it); updates are thread-safe.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

FEATURES = 5
"""(1, rows, steps, tokens, batched): the call-time features."""

MIN_TIME_S = 1e-6
"""Floor of a predicted call time (seconds), so that ratios by t(n) are always defined."""


def call_seconds(
    theta: Sequence[float] | NDArray[np.float64], rows: int, steps: int, tokens: int, batched: int
) -> float:
    """theta . (1, rows, steps, tokens, batched), at least MIN_TIME_S: the one call-time formula."""
    return max(
        float(theta[0] + theta[1] * rows + theta[2] * steps + theta[3] * tokens + theta[4] * batched), MIN_TIME_S
    )


def second_most(new_tokens: Sequence[int]) -> int:
    """Decode steps with at least two rows: the second most new tokens (0 for one row)."""
    return sorted(new_tokens)[-2] if len(new_tokens) > 1 else 0


EXPLORE = (1.0, 0.0, 0.5, 0.25)
"""Fractions of N sent by a cost-aware budget's first calls, n = max(1, ceil(f N)): full, 1, half,
quarter, so that the time model sees different row counts before it is trusted."""


class CallTimeModel:
    """t = theta . (1, rows, steps, tokens, batched) with theta >= 0, fitted by exact NNLS.

    For a call of requests with new-token counts L_1..L_n: rows = n, steps = max L_i
    (lockstep decode), tokens = sum L_i, batched = the second largest L_i (steps with two
    rows or more; 0 if n = 1). Least squares over all observed calls with theta >= 0 is
    solved exactly from running sums (X^T X, X^T y): for each support S of the 5 features
    the unconstrained solution on S; the best non-negative one wins.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.theta: NDArray[np.float64] = np.zeros(FEATURES)
        self._gram = np.zeros((FEATURES, FEATURES))
        self._xty = np.zeros(FEATURES)

    @staticmethod
    def features(new_tokens: Sequence[int]) -> NDArray[np.float64]:
        return np.array([1.0, len(new_tokens), max(new_tokens), sum(new_tokens), second_most(new_tokens)], dtype=float)

    def predict(self, new_tokens: Sequence[int]) -> float:
        """Predicted seconds of a call with these new-token counts (at least MIN_TIME_S)."""
        return self.time(len(new_tokens), max(new_tokens), sum(new_tokens), second_most(new_tokens))

    def time(self, rows: int, steps: int, tokens: int, batched: int) -> float:
        """Predicted seconds of a call of ``rows`` requests, ``steps`` decode steps (the most new
        tokens of one), ``tokens`` new tokens in all and ``batched`` steps with two rows or more
        (the second most new tokens; at least MIN_TIME_S)."""
        return call_seconds(self.theta, rows, steps, tokens, batched)

    def observe(self, new_tokens: Sequence[int], time_s: float) -> None:
        """Add one call (its requests' new-token counts and wall time) and refit."""
        x = self.features(new_tokens)
        with self._lock:
            self._gram += np.outer(x, x)
            self._xty += time_s * x
            self.calls += 1
            self.theta = self._nnls()

    def _nnls(self) -> NDArray[np.float64]:
        # ||X theta - y||^2 - ||y||^2 = theta' G theta - 2 theta' b; on the normal-equation
        # solution of a support S it equals -theta_S' b_S. Columns are scaled to unit norm
        # (D G D) so that rows and token counts of different magnitudes solve stably. If the
        # unconstrained solution (first support) is non-negative it is optimal. Every support
        # is solved in one stacked pinv of 5 x 5 matrices, zero outside the support (the pinv
        # of diag(A, 0) is diag(pinv(A), 0)); the first with the least loss wins.
        scale = 1.0 / np.sqrt(np.maximum(np.diag(self._gram), 1e-300))
        gram = scale[:, None] * self._gram * scale
        b = scale * self._xty
        masked = gram * (_SUPPORTS[:, :, None] & _SUPPORTS[:, None, :])
        theta = (
            np.einsum("sij,sj->si", np.linalg.pinv(masked), b * _SUPPORTS) * scale * _SUPPORTS
        )  # exact zeros outside
        loss = -(theta @ self._xty)
        best, best_loss = np.zeros(FEATURES), 0.0  # theta = 0: loss 0 relative to ||y||^2
        for i in range(len(_SUPPORTS)):
            if loss[i] < best_loss and np.all(theta[i] >= 0.0):
                best, best_loss = theta[i], float(loss[i])
                if i == 0:
                    break
        return best


_SUPPORTS = np.array(
    [
        [j in s for j in range(FEATURES)]
        for size in range(FEATURES, 0, -1)
        for s in itertools.combinations(range(FEATURES), size)
    ]
)
"""The 31 supports of the 5 features, largest first (the unconstrained solution first)."""
