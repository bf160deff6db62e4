"""What the baselines share: the method protocol (:mod:`presto_sgl.methods`) and their
config (:class:`~presto_sgl.config.BaselineConfig`: the target fields they use, tau, their
declared parameters).

Their calls are plain generation calls, recorded as block extensions (``kind="extend"``):
``extend_calls`` and ``extend_time_s`` of their metrics are the whole cost, and
``model_calls`` (MH calls) is 0. Like the MH samplers they generate exactly
``max_new_tokens`` tokens (no EOS stop); the answer ends at the first stop token. Their
traces are those of every method: ``run``, ``call`` records, their own declared records,
``summary``. A resumed baseline is drawn again from its first call (its draws are keyed:
on a seeded engine, the very same response).
"""

from __future__ import annotations

from ..config import BaselineConfig
from ..engines.base import Engine
from ..methods import MethodBase


class Baseline(MethodBase):
    """A method that is not MH, on ``engine`` with its ``config`` (default: the baseline's
    defaults): the target fields it ``uses`` (alpha, max_new_tokens; Power-SMC also
    block_size), tau and its own parameters."""

    name = "baseline"
    uses: tuple[str, ...] = ("alpha", "max_new_tokens")

    def __init__(self, engine: Engine, config: BaselineConfig | None = None) -> None:
        config = config if config is not None else BaselineConfig(self.name)
        if not isinstance(config, BaselineConfig) or config.baseline != self.name:
            raise TypeError(f"`config` must be a BaselineConfig of {self.name!r}, got {config!r}")
        self.engine, self.config, self.params = engine, config, config.params
        self.max_new_tokens = config.target.max_new_tokens
        self.alpha = float(config.target.alpha)
        self.temperature = config.temperature

    def describe(self) -> dict[str, object]:
        return self.config.describe()
