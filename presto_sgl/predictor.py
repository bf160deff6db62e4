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

:class:`OnlinePredictor` refits during a run on the decisions the chain has already
scored, with its base predictor as a prior: the base's class probabilities on a grid of
cut fractions enter the fit as ``prior_weight`` soft pseudo-observations. It only sees
realized decisions (never an unused proposal), so the chain stays exact.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .certainty import CLASSES, EPS, Observation, Predictor, certainty_class
from .metrics import node_record, read_trace

FORMAT = "presto-sgl/certainty-predictor"
VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "assets" / "certainty" / "default.json"

FEATURES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
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
        raise ValueError(
            f"`features` (={list(features)!r}) must be distinct names from {sorted(FEATURES)}, e.g. ['cut_fraction']"
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
            raise ValueError(f"`eps` (={eps!r}) must lie in (0, 0.5), e.g. 0.01")
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
            raise ValueError(f"`cut_fraction` (={cut_fraction!r}) must lie in [0, 1] (c/T with 0 <= c < T)")
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
            raise ValueError(f"{source} is not a saved eps-certainty predictor (no \"format\": {FORMAT!r}); {fix}")
        if data.get("version") != VERSION:
            raise ValueError(f"{source} has predictor format version {data.get('version')!r}; this presto-sgl reads {VERSION}; {fix}")
        if data.get("classes") != list(CLASSES):
            raise ValueError(f"{source}: \"classes\" must be {list(CLASSES)}, got {data.get('classes')!r}; {fix}")
        try:
            return cls(data["features"], data["coef"], data["intercept"], eps=data["eps"], training=data.get("training"))
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


# -- fitting ------------------------------------------------------------------------
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
    observations: Sequence[Observation], features: Sequence[str] = DEFAULT_FEATURES, *, C: float = 1.0,
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


# -- evaluation ---------------------------------------------------------------------
def group_folds(groups: Sequence[str], folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index arrays of ``folds``-fold CV holding out whole groups (prompts)."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"`folds` (={folds!r}) must be an integer >= 2, e.g. 5")
    if n_groups < folds:
        raise ValueError(
            f"`folds` (={folds}) exceeds the number of prompts in the traces ({n_groups}); "
            f"use folds <= {n_groups} or add traces of more prompts"
        )
    idx = np.arange(len(groups))
    return list(GroupKFold(n_splits=folds).split(idx, groups=list(groups)))


def _scores(probs: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(accuracy of the argmax class, mean log loss -log P(y))."""
    return float(np.mean(probs.argmax(axis=1) == y)), float(-np.mean(np.log(probs[np.arange(len(y)), y])))


@dataclass(frozen=True)
class Evaluation:
    """Held-out scores of the model and of the class prior (paper App. E.7, Fig. 4 shares)."""

    examples: int
    groups: int
    folds: int  # 0: a given predictor scored as is (no refits)
    class_counts: tuple[int, int, int]
    accuracy: float
    log_loss: float
    prior_accuracy: float  # always the most frequent class
    prior_log_loss: float  # the class frequencies for every decision

    @property
    def shares(self) -> tuple[float, float, float]:
        """Shares of eps-certain reject, uncertain, eps-certain accept decisions."""
        n = sum(self.class_counts)
        return tuple(c / n for c in self.class_counts)  # type: ignore[return-value]


def _prior(y: np.ndarray) -> np.ndarray:
    return np.bincount(y, minlength=3) / len(y)


def cross_validate(
    observations: Sequence[Observation], features: Sequence[str] = DEFAULT_FEATURES, *, folds: int = 5, C: float = 1.0
) -> Evaluation:
    """Pooled out-of-fold scores: every decision is scored by a model (and a class prior)
    fitted on folds that never saw its prompt."""
    x = np.array([o.cut_fraction for o in observations], dtype=float)
    y = np.array([o.label for o in observations], dtype=int)
    groups = [o.group for o in observations]
    probs = np.zeros((len(y), 3))
    prior = np.zeros((len(y), 3))
    for train, test in group_folds(groups, folds):
        model = fit_logistic(x[train], y[train], features, C=C)
        probs[test] = model.proba_many(x[test])
        prior[test] = _prior(y[train])
    acc, loss = _scores(probs, y)
    prior_acc, prior_loss = _scores(prior, y)
    return Evaluation(len(y), len(set(groups)), folds, tuple(np.bincount(y, minlength=3).tolist()), acc, loss, prior_acc, prior_loss)


def evaluate(predictor: Predictor, observations: Sequence[Observation]) -> Evaluation:
    """Scores of a given predictor on the decisions, against the decisions' own class prior."""
    if not observations:
        raise ValueError("no decisions to score: pass traces that contain 'node' records")
    y = np.array([o.label for o in observations], dtype=int)
    probs = np.array([predictor.proba(o.cut_fraction) for o in observations], dtype=float)
    acc, loss = _scores(probs, y)
    prior_acc, prior_loss = _scores(np.tile(_prior(y), (len(y), 1)), y)
    groups = len({o.group for o in observations})
    return Evaluation(len(y), groups, 0, tuple(np.bincount(y, minlength=3).tolist()), acc, loss, prior_acc, prior_loss)


# -- traces -------------------------------------------------------------------------
def observations_from_trace(records: Iterable[Mapping[str, Any]], eps: float = EPS) -> list[Observation]:
    """Every scored decision of a trace: x = cut/T, its eps-certainty class, group = prompt id."""
    out: list[Observation] = []
    group: str | None = None
    block_size = 0
    for rec in records:
        if rec["type"] == "run":
            group, block_size = str(rec["prompt_id"]), rec["block_size"]
        elif rec["type"] == "node":
            if group is None:
                raise ValueError("trace has a 'node' record before any 'run' record: is it truncated at the start?")
            node = node_record(dict(rec), block_size)
            out.append(Observation(node.cut / node.length, certainty_class(node.log_accept, eps), group))
    return out


def load_observations(paths: Sequence[str | Path]) -> list[Observation]:
    """The scored decisions of JSONL traces (``presto-sgl sample --trace``); ValueError naming a bad file."""
    out: list[Observation] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as stream:
                found = observations_from_trace(read_trace(stream))
        except OSError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc.strerror or exc}") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"trace {str(path)!r} is not a presto-sgl trace ({type(exc).__name__}: {exc}); "
                "write one with `presto-sgl sample --trace FILE`"
            ) from None
        if not found:
            raise ValueError(f"trace {str(path)!r} has no scored decisions ('node' records); run with --steps >= 1")
        out.extend(found)
    return out


# -- online -------------------------------------------------------------------------
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
            for l in range(3):
                s = Cw * P[:, k] * ((k == l) - P[:, l])
                H[k * (d + 1):(k + 1) * (d + 1), l * (d + 1):(l + 1) * (d + 1)] = (A * s[:, None]).T @ A + (k == l) * np.diag(pen)
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
        if isinstance(prior_weight, bool) or not isinstance(prior_weight, (int, float)) or not (
            math.isfinite(prior_weight) and prior_weight > 0
        ):
            raise ValueError(f"`prior_weight` (={prior_weight!r}) must be a number > 0 (decisions the base counts as), e.g. 40")
        if isinstance(min_examples, bool) or not isinstance(min_examples, int) or min_examples < 1:
            raise ValueError(f"`min_examples` (={min_examples!r}) must be an integer >= 1, e.g. 10")
        if isinstance(grid, bool) or not isinstance(grid, int) or grid < 2:
            raise ValueError(f"`grid` (={grid!r}) must be an integer >= 2, e.g. 20")
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
        self.refits = 0
        self.refit_time_s = 0.0

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        return self.current.proba(cut_fraction)

    def observe(self, observations: Sequence[Observation]) -> None:
        """Add the round's decisions and refit (once there are enough of two classes)."""
        if not observations:
            return
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


def load_predictor(spec: str, *, online: bool = False) -> Predictor:
    """The predictor named by ``spec``: "default" (shipped with the package) or a saved file;
    ``online`` wraps it in an :class:`OnlinePredictor` that refits during the run."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"`predictor` (={spec!r}) must be 'default' or the path of a saved predictor")
    if spec == "default":
        base = LogisticPredictor.load(DEFAULT_PATH)
    else:
        try:
            base = LogisticPredictor.load(spec)
        except ValueError as exc:
            raise ValueError(f"`predictor`: {exc}") from None
    return OnlinePredictor(base) if online else base
