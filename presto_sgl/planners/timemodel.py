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
        th = self.theta
        return max(float(th[0] + th[1] * rows + th[2] * steps + th[3] * tokens), MIN_TIME_S)

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
        # unconstrained solution (first support) is non-negative it is optimal: stop there.
        # The supports of one size are solved in one stacked pinv; the first least loss wins.
        scale = 1.0 / np.sqrt(np.maximum(np.diag(self._gram), 1e-300))
        gram = scale[:, None] * self._gram * scale
        b = scale * self._xty
        best, best_loss = np.zeros(4), 0.0  # theta = 0: loss 0 relative to ||y||^2
        for size in range(4, 0, -1):
            supports = np.array(list(itertools.combinations(range(4), size)))
            g = gram[supports[:, :, None], supports[:, None, :]]
            theta = np.einsum("sij,sj->si", np.linalg.pinv(g), b[supports]) * scale[supports]
            loss = -np.einsum("si,si->s", theta, self._xty[supports])
            for s, theta_s, loss_s in zip(supports, theta, loss):
                if np.all(theta_s >= 0.0) and loss_s < best_loss:
                    best, best_loss = np.zeros(4), float(loss_s)
                    best[s] = theta_s
                    if size == 4:
                        return best
        return best
