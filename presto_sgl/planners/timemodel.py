"""The call-time model of the cost-aware planner: t = theta . (1, rows, steps, tokens).

Forks decode in lockstep, so a call lasts max(new tokens) decode steps, and each step
costs more with more active rows (total decoded tokens). One model is shared by every
run of a sampler (calls of any chain teach it); updates are thread-safe.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np

MIN_TIME_S = 1e-6
"""Floor of a predicted call time (seconds), so that ratios by t(n) are always defined."""


def call_seconds(theta: Sequence[float], rows: int, steps: int, tokens: int) -> float:
    """theta . (1, rows, steps, tokens), at least MIN_TIME_S: the one call-time formula."""
    return max(float(theta[0] + theta[1] * rows + theta[2] * steps + theta[3] * tokens), MIN_TIME_S)


class CallTimeModel:
    """t = theta . (1, rows, steps, tokens) with theta >= 0, fitted by exact NNLS.

    For a call of requests with new-token counts L_1..L_n: rows = n, steps = max L_i
    (lockstep decode), tokens = sum L_i. Least squares over all observed calls with
    theta >= 0 is solved exactly from running sums (X^T X, X^T y): for each support S of
    the 4 features the unconstrained solution on S; the best non-negative one wins.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.theta = np.zeros(4)
        self._gram = np.zeros((4, 4))
        self._xty = np.zeros(4)

    @staticmethod
    def features(new_tokens: Sequence[int]) -> np.ndarray:
        return np.array([1.0, len(new_tokens), max(new_tokens), sum(new_tokens)], dtype=float)

    def predict(self, new_tokens: Sequence[int]) -> float:
        """Predicted seconds of a call with these new-token counts (at least MIN_TIME_S)."""
        return self.time(len(new_tokens), max(new_tokens), sum(new_tokens))

    def time(self, rows: int, steps: int, tokens: int) -> float:
        """Predicted seconds of a call of ``rows`` requests, ``steps`` decode steps (the most new
        tokens of one) and ``tokens`` new tokens in all (at least MIN_TIME_S)."""
        return call_seconds(self.theta, rows, steps, tokens)

    def observe(self, new_tokens: Sequence[int], time_s: float) -> None:
        """Add one call (its requests' new-token counts and wall time) and refit."""
        x = self.features(new_tokens)
        with self._lock:
            self._gram += np.outer(x, x)
            self._xty += time_s * x
            self.calls += 1
            self.theta = self._nnls()

    def _nnls(self) -> np.ndarray:
        # ||X theta - y||^2 - ||y||^2 = theta' G theta - 2 theta' b; on the normal-equation
        # solution of a support S it equals -theta_S' b_S. Columns are scaled to unit norm
        # (D G D) so that rows and token counts of different magnitudes solve stably. If the
        # unconstrained solution (first support) is non-negative it is optimal. Every support
        # is solved in one stacked pinv of 4 x 4 matrices, zero outside the support (the pinv
        # of diag(A, 0) is diag(pinv(A), 0)); the first with the least loss wins.
        scale = 1.0 / np.sqrt(np.maximum(np.diag(self._gram), 1e-300))
        gram = scale[:, None] * self._gram * scale
        b = scale * self._xty
        masked = gram * (_SUPPORTS[:, :, None] & _SUPPORTS[:, None, :])
        theta = np.einsum("sij,sj->si", np.linalg.pinv(masked), b * _SUPPORTS) * scale * _SUPPORTS  # exact zeros outside
        loss = -(theta @ self._xty)
        best, best_loss = np.zeros(4), 0.0  # theta = 0: loss 0 relative to ||y||^2
        for i in range(len(_SUPPORTS)):
            if loss[i] < best_loss and np.all(theta[i] >= 0.0):
                best, best_loss = theta[i], float(loss[i])
                if i == 0:
                    break
        return best


_SUPPORTS = np.array([[j in s for j in range(4)] for size in range(4, 0, -1)
                      for s in itertools.combinations(range(4), size)])
"""The 15 supports of the 4 features, largest first (the unconstrained solution first)."""
