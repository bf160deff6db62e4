"""The eps-certainty predictor: multinomial logistic regression on the cut fraction.

For a candidate decision with cut c in a stage of T response tokens, x = c/T and

    P(class k | x) = softmax_k(b_k + sum_j W_kj f_j(x)),   k in (reject, uncertain, accept),

with features f_j of x (default: f(x) = x alone, as in the paper, App. E.7). Fitting
uses scikit-learn (standardized features, L2 penalty with C = 1, like the paper);
the standardization is folded into W and b, so the saved model is plain coefficients on
the raw features and plan-time evaluation needs only ``math``/numpy.

Saved form (JSON, floats written with ``repr`` so a load reproduces every bit)::

    {"format": "presto-sgl/certainty-predictor", "version": 1, "eps": 0.01,
     "classes": ["reject", "uncertain", "accept"], "features": ["cut_fraction"],
     "coef": [[...], [...], [...]], "intercept": [...], "training": {...}}
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .certainty import CLASSES, EPS, Observation

FORMAT = "presto-sgl/certainty-predictor"
VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "assets" / "certainty" / "default.json"

FEATURES: dict[str, Callable[[np.ndarray | np.float64], np.ndarray | np.float64]] = {
    "cut_fraction": lambda x: x,
    "cut_fraction_sq": lambda x: x * x,
    "log_suffix_fraction": lambda x: np.log(1.0 - x + 0.01),  # log share of the response resampled
}
"""Feature name -> f(x) of the cut fraction x = c/T (numpy, elementwise). Functions of x
only, so every feature is available through ``Predictor.proba(cut_fraction)``."""
DEFAULT_FEATURES = ("cut_fraction",)


def _check_features(features: Sequence[str]) -> tuple[str, ...]:
    features = tuple(features)
    unknown = [f for f in features if f not in FEATURES]
    if not features or unknown or len(set(features)) != len(features):
        raise ConfigError(
            "features",
            features,
            f"{{features}} (={list(features)!r}) must be distinct names from {sorted(FEATURES)}, e.g. ['cut_fraction']",
        )
    return features


def design(cut_fractions: Sequence[float] | np.ndarray, features: Sequence[str]) -> np.ndarray:
    """The (n, d) feature matrix of the cut fractions."""
    features = _check_features(features)
    x = np.asarray(cut_fractions, dtype=float)
    if x.ndim != 1 or not np.all((x >= 0.0) & (x <= 1.0)):
        raise ValueError("cut fractions must be a 1-d sequence of numbers in [0, 1] (c/T with 0 <= c < T)")
    return np.column_stack([FEATURES[f](x) for f in features]).reshape(len(x), len(features))


class LogisticPredictor:
    """A fitted 3-class logistic regression on features of the cut fraction (static)."""

    def __init__(
        self,
        features: Sequence[str],
        coef: Sequence[Sequence[float]],
        intercept: Sequence[float],
        *,
        eps: float = EPS,
        training: Mapping[str, Any] | None = None,
    ) -> None:
        self.features = _check_features(features)
        self.coef = tuple(tuple(float(w) for w in row) for row in coef)
        self.intercept = tuple(float(b) for b in intercept)
        if len(self.coef) != 3 or any(len(row) != len(self.features) for row in self.coef) or len(self.intercept) != 3:
            raise ValueError(
                f"`coef` must be 3 rows (one per class {CLASSES}) of {len(self.features)} weights and `intercept` 3 "
                f"numbers; got {[len(r) for r in self.coef]} and {len(self.intercept)}"
            )
        if not all(math.isfinite(v) for v in (*self.intercept, *(w for r in self.coef for w in r))):
            raise ValueError("`coef` and `intercept` must be finite numbers")
        if not 0.0 < eps < 0.5:
            raise ConfigError("eps", eps, f"{{eps}} (={eps!r}) must lie in (0, 0.5), e.g. 0.01")
        self.eps = float(eps)
        self.training = dict(training or {})
        self._funcs = tuple(FEATURES[f] for f in self.features)
        self._cache: dict[float, tuple[float, float, float]] = {}

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        """(P(reject), P(uncertain), P(accept)) at x = c/T: a softmax of b + W f(x) (memoized)."""
        hit = self._cache.get(cut_fraction)
        if hit is not None:
            return hit
        if not 0.0 <= cut_fraction <= 1.0:
            raise ConfigError(
                "cut_fraction",
                cut_fraction,
                f"{{cut_fraction}} (={cut_fraction!r}) must lie in [0, 1] (c/T with 0 <= c < T)",
            )
        f = [float(g(np.float64(cut_fraction))) for g in self._funcs]
        z = [b + sum(w * v for w, v in zip(row, f)) for b, row in zip(self.intercept, self.coef)]
        m = max(z)
        e = [math.exp(v - m) for v in z]
        s = e[0] + e[1] + e[2]
        p = (e[0] / s, e[1] / s, e[2] / s)
        if len(self._cache) >= 65536:  # cut fractions are c/T: a few thousand distinct values per run
            self._cache.clear()
        self._cache[cut_fraction] = p
        return p

    def proba_many(self, cut_fractions: Sequence[float] | np.ndarray) -> np.ndarray:
        """Class probabilities of many cut fractions at once, shape (n, 3)."""
        z = design(cut_fractions, self.features) @ np.array(self.coef).T + np.array(self.intercept)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def observe(self, observations: Sequence[Observation]) -> None:
        """A static predictor ignores the run's decisions."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "eps": self.eps,
            "classes": list(CLASSES),
            "features": list(self.features),
            "coef": [list(row) for row in self.coef],
            "intercept": list(self.intercept),
            "training": self.training,
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: Any, *, source: str = "<json>") -> LogisticPredictor:
        """The predictor of a saved form; ValueError naming ``source`` if it is not one."""
        fix = "write one with `presto-sgl fit-predictor TRACE... -o FILE`, or use 'default'"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f'{source} is not a saved eps-certainty predictor (no "format": {FORMAT!r}); {fix}')
        if data.get("version") != VERSION:
            raise ValueError(
                f"{source} has predictor format version {data.get('version')!r}; this presto-sgl reads {VERSION}; {fix}"
            )
        if data.get("classes") != list(CLASSES):
            raise ValueError(f'{source}: "classes" must be {list(CLASSES)}, got {data.get("classes")!r}; {fix}')
        try:
            return cls(
                data["features"], data["coef"], data["intercept"], eps=data["eps"], training=data.get("training")
            )
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{source} is not a valid predictor file ({detail}); {fix}") from None

    @classmethod
    def load(cls, path: str | Path) -> LogisticPredictor:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(
                f"predictor file {str(path)!r} does not exist; pass 'default' or a file written by "
                "`presto-sgl fit-predictor TRACE... -o FILE`"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read predictor file {str(path)!r}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"predictor file {str(path)!r} is not JSON ({exc}); pass a file written by `presto-sgl fit-predictor`"
            ) from None
        return cls.from_json(data, source=f"predictor file {str(path)!r}")
