"""The online predictor: refit during a run on the decisions the chains have scored.

The base predictor acts as a prior: its class probabilities on a grid of cut fractions
enter the fit as ``prior_weight`` soft pseudo-observations. It only sees realized
decisions (never an unused proposal), so the chains stay exact. One online predictor
may serve many chains at once: refits are serialized by a lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..fields import integer
from .certainty import Observation, Predictor
from .model import DEFAULT_FEATURES, LogisticPredictor, design


def _newton_refit(
    X: np.ndarray, y: np.ndarray, w: np.ndarray, C: float, start: LogisticPredictor, training: Mapping[str, Any]
) -> LogisticPredictor:
    """The fit of :func:`fit_logistic` (same objective, same standardization) by Newton's
    method in numpy, warm-started at ``start``: a few milliseconds, no scikit-learn call.

    theta_k = [W_k, b_k] on a = [z, 1]; gradient sum_i C w_i (p_ik - [y_i = k]) a_i + [W_k, 0],
    Hessian blocks sum_i C w_i p_ik ([k = l] - p_il) a_i a_i^T + [k = l] diag(1.., 0); the
    softmax's shift of all b_k is flat, so the solve adds a tiny ridge.
    """
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    n, d = X.shape
    A = np.hstack([(X - mu) / sd, np.ones((n, 1))])
    Y = np.eye(3)[y]
    Cw = C * w
    W0 = np.array(start.coef)
    theta = np.hstack([W0 * sd, (np.array(start.intercept) + W0 @ mu)[:, None]])
    pen = np.r_[np.ones(d), 0.0]

    def objective(th: np.ndarray) -> tuple[float, np.ndarray]:
        z = A @ th.T
        z -= z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return float(-(Cw * logp[np.arange(n), y]).sum() + 0.5 * np.sum(pen * th * th)), np.exp(logp)

    value, P = objective(theta)
    for _ in range(50):
        grad = ((Cw[:, None] * (P - Y)).T @ A + pen * theta).reshape(-1)
        H = np.empty((3 * (d + 1), 3 * (d + 1)))
        for k in range(3):
            for j in range(3):
                s = Cw * P[:, k] * ((k == j) - P[:, j])
                H[k * (d + 1) : (k + 1) * (d + 1), j * (d + 1) : (j + 1) * (d + 1)] = (A * s[:, None]).T @ A + (
                    k == j
                ) * np.diag(pen)
        step = np.linalg.solve(H + 1e-9 * np.eye(len(grad)), grad).reshape(3, d + 1)
        t = 1.0
        while True:  # backtracking: Newton steps on a convex objective rarely need it
            new_value, new_P = objective(theta - t * step)
            if new_value <= value or t < 1e-6:
                break
            t /= 2
        theta, decrease, value, P = theta - t * step, value - new_value, new_value, new_P
        if decrease <= 1e-12 * max(1.0, abs(value)):
            break
    coef = theta[:, :d] / sd
    return LogisticPredictor(start.features, coef.tolist(), (theta[:, d] - coef @ mu).tolist(), training=training)


class OnlinePredictor:
    """A predictor refit during a run on the decisions it has already scored.

    At each :meth:`observe` with new decisions (a round) it refits once it holds at least
    ``min_examples`` decisions of at least two classes. The fit adds the base's belief as
    pseudo-observations: at each of ``grid`` cut fractions x_g = (g + 1/2)/grid, class k
    with weight prior_weight * P_base(k | x_g) / grid, so the base counts as
    ``prior_weight`` decisions spread uniformly over the cuts (the law of c/T), and early
    refits stay close to it. Refits solve :func:`fit_logistic`'s objective by Newton's
    method warm-started at the previous fit; ``refits`` and ``refit_time_s`` measure them.
    """

    def __init__(
        self, base: Predictor, *, prior_weight: float = 40.0, min_examples: int = 10, grid: int = 20, C: float = 1.0
    ) -> None:
        if (
            isinstance(prior_weight, bool)
            or not isinstance(prior_weight, (int, float))
            or not (math.isfinite(prior_weight) and prior_weight > 0)
        ):
            raise ConfigError(
                "prior_weight",
                prior_weight,
                f"{{prior_weight}} (={prior_weight!r}) must be a number > 0 (decisions the base counts as), e.g. 40",
            )
        integer(1, "decisions before the first refit", example=10)("min_examples", min_examples)
        integer(2, "points of the cut-fraction grid", example=20)("grid", grid)
        self.base = base
        features = base.features if isinstance(base, LogisticPredictor) else DEFAULT_FEATURES
        self.min_examples = min_examples
        self.C = C
        xg = (np.arange(grid) + 0.5) / grid
        pg = np.array([base.proba(float(v)) for v in xg])
        self._prior_x = np.repeat(xg, 3)
        self._prior_y = np.tile(np.arange(3), grid)
        self._prior_w = prior_weight * pg.reshape(-1) / grid
        # the refit's starting point: the base itself, or its fit on the pseudo-observations
        self._fit = base if isinstance(base, LogisticPredictor) else LogisticPredictor(features, [[0.0]] * 3, [0.0] * 3)
        self._x: list[float] = []
        self._y: list[int] = []
        self.current: Predictor = base
        self._lock = threading.Lock()
        self.refits = 0
        self.refit_time_s = 0.0

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        return self.current.proba(cut_fraction)

    def observe(self, observations: Sequence[Observation]) -> None:
        """Add the round's decisions and refit (once there are enough of two classes)."""
        if not observations:
            return
        with self._lock:
            self._add(observations)

    def _add(self, observations: Sequence[Observation]) -> None:
        self._x.extend(o.cut_fraction for o in observations)
        self._y.extend(o.label for o in observations)
        if len(self._y) < self.min_examples or len(set(self._y)) < 2:
            return
        t0 = time.perf_counter()
        X = design(np.concatenate([self._prior_x, self._x]), self._fit.features)
        y = np.concatenate([self._prior_y, self._y]).astype(int)
        w = np.concatenate([self._prior_w, np.ones(len(self._y))])
        self._fit = _newton_refit(X, y, w, self.C, self._fit, {"online_examples": len(self._y)})
        self.current = self._fit
        self.refit_time_s += time.perf_counter() - t0
        self.refits += 1
