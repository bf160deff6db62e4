"""Fitting the eps-certainty predictor: scikit-learn's multinomial logistic regression."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .certainty import CLASSES, Observation
from .model import DEFAULT_FEATURES, LogisticPredictor, _check_features, design


def fit_logistic(
    cut_fractions: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    features: Sequence[str] = DEFAULT_FEATURES,
    *,
    sample_weight: Sequence[float] | np.ndarray | None = None,
    C: float = 1.0,
    training: Mapping[str, Any] | None = None,
) -> LogisticPredictor:
    """Fit P(class | x) by scikit-learn's multinomial logistic regression.

    Minimizes C * sum_i w_i (-log P(y_i | x_i)) + |W|^2 / 2 over standardized features
    z = (f(x) - mu) / sd, then folds the scaling back: W_raw = W / sd, b_raw = b - W_raw mu.
    Every class must occur (with positive weight) so each gets its own coefficients.
    """
    from sklearn.linear_model import LogisticRegression

    features = _check_features(features)
    y = np.asarray(labels, dtype=int)
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    present = {c for c in range(3) if np.any(w[y == c] > 0)}
    if len(present) < 3:
        missing = [CLASSES[c] for c in range(3) if c not in present]
        raise ValueError(
            f"fitting needs examples of all three classes {CLASSES}; none are {missing} "
            f"(class counts {[int(np.sum(y == c)) for c in range(3)]}): add traces with more decisions"
        )
    X = design(cut_fractions, features)
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    model = LogisticRegression(C=C, max_iter=1000, tol=1e-8)
    model.fit((X - mu) / sd, y, sample_weight=w)
    coef = model.coef_ / sd
    intercept = model.intercept_ - coef @ mu
    return LogisticPredictor(features, coef.tolist(), intercept.tolist(), training=training)


def fit_predictor(
    observations: Sequence[Observation],
    features: Sequence[str] = DEFAULT_FEATURES,
    *,
    C: float = 1.0,
    training: Mapping[str, Any] | None = None,
) -> LogisticPredictor:
    """Fit on realized decisions; ``training`` gains the example, group and class counts."""
    if not observations:
        raise ValueError("no decisions to fit on: pass traces that contain 'node' records")
    x = [o.cut_fraction for o in observations]
    y = [o.label for o in observations]
    counts = Counter(y)
    summary = {
        "examples": len(observations),
        "groups": len({o.group for o in observations}),
        "class_counts": {CLASSES[c]: counts.get(c, 0) for c in range(3)},
        "C": C,
        **(training or {}),
    }
    return fit_logistic(x, y, features, C=C, training=summary)
