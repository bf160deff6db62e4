"""The eps-certainty predictor (paper §3.3; docs/design.md §5): classes and protocol
(:mod:`.certainty`), the logistic model and its file format (:mod:`.model`), fitting
(:mod:`.fitting`), held-out evaluation (:mod:`.evaluation`) and online refits
(:mod:`.online`)."""

from __future__ import annotations

from ..errors import ConfigError
from .certainty import CLASSES, EPS, ConstantPredictor, Observation, Predictor, certainty_class, h_plus
from .model import DEFAULT_PATH, LogisticPredictor
from .online import OnlinePredictor

__all__ = [
    "CLASSES",
    "DEFAULT_PATH",
    "EPS",
    "ConstantPredictor",
    "LogisticPredictor",
    "Observation",
    "OnlinePredictor",
    "Predictor",
    "certainty_class",
    "h_plus",
    "load_predictor",
]


def load_predictor(spec: str, *, online: bool = False) -> Predictor:
    """The predictor named by ``spec``: "default" (shipped with the package) or a saved file;
    ``online`` wraps it in an :class:`OnlinePredictor` that refits during the run."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(
            "predictor", spec, f"{{predictor}} (={spec!r}) must be 'default' or the path of a saved predictor"
        )
    if spec == "default":
        base = LogisticPredictor.load(DEFAULT_PATH)
    else:
        try:
            base = LogisticPredictor.load(spec)
        except ValueError as exc:
            raise ConfigError("predictor", spec, f"{{predictor}}: {exc}") from None
    return OnlinePredictor(base) if online else base
