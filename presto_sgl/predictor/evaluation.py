"""Scoring the eps-certainty predictor: held-out cross-validation against the class prior
(paper App. E.7), and the scored decisions of traces as observations."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..chain.trace import node_record, read_trace
from ..errors import ConfigError
from ..fields import integer
from .certainty import EPS, Observation, Predictor, certainty_class
from .fitting import fit_logistic
from .model import DEFAULT_FEATURES


def group_folds(groups: Sequence[str], folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index arrays of ``folds``-fold CV holding out whole groups (prompts)."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    integer(2, "cross-validation folds", example=5)("folds", folds)
    if n_groups < folds:
        raise ConfigError(
            "folds",
            folds,
            f"{{folds}} (={folds}) exceeds the number of prompts in the traces "
            f"({n_groups}); use {{folds}} <= {n_groups} or add traces of more prompts",
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
    _: KW_ONLY
    accuracy: float
    log_loss: float
    prior_accuracy: float  # always the most frequent class
    prior_log_loss: float  # the class frequencies for every decision

    @property
    def shares(self) -> tuple[float, float, float]:
        """Shares of eps-certain reject, uncertain, eps-certain accept decisions."""
        n = sum(self.class_counts)
        return tuple(c / n for c in self.class_counts)  # type: ignore[return-value]  # three classes, three shares


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
    return _evaluation(probs, prior, y, groups=len(set(groups)), folds=folds)


def evaluate(predictor: Predictor, observations: Sequence[Observation]) -> Evaluation:
    """Scores of a given predictor on the decisions, against the decisions' own class prior."""
    if not observations:
        raise ValueError("no decisions to score: pass traces that contain 'node' records")
    y = np.array([o.label for o in observations], dtype=int)
    probs = np.array([predictor.proba(o.cut_fraction) for o in observations], dtype=float)
    prior = np.tile(_prior(y), (len(y), 1))
    return _evaluation(probs, prior, y, groups=len({o.group for o in observations}), folds=0)


def _evaluation(probs: np.ndarray, prior: np.ndarray, y: np.ndarray, *, groups: int, folds: int) -> Evaluation:
    """The scores of ``probs`` and of ``prior`` (per decision) on the classes ``y``."""
    (acc, loss), (prior_acc, prior_loss) = _scores(probs, y), _scores(prior, y)
    counts = tuple(np.bincount(y, minlength=3).tolist())
    return Evaluation(
        len(y),
        groups,
        folds,
        counts,
        accuracy=acc,
        log_loss=loss,
        prior_accuracy=prior_acc,
        prior_log_loss=prior_loss,
    )


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
