"""What the baselines share: the method protocol (:mod:`presto_sgl.methods`), their config
from the schedule (alpha, tau, max_new_tokens) and their declared parameters.

Their calls are plain generation calls, recorded as block extensions (``kind="extend"``):
``extend_calls`` and ``extend_time_s`` of their metrics are the whole cost, and
``model_calls`` (MH calls) is 0. Like the MH samplers they generate exactly
``max_new_tokens`` tokens (no EOS stop); the answer ends at the first stop token. Their
traces are those of every method: ``run``, ``call`` records, their own declared records,
``summary``. A resumed baseline is drawn again from its first call (its draws are keyed:
on a seeded engine, the very same response).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..chain.executor import OnTransition, Recorder
from ..chain.resume import Checkpoint
from ..chain.state import ChainState
from ..chain.trace import TraceWriter
from ..config import PowerConfig
from ..engines.base import Engine
from ..methods import MethodBase, SampleResult, check_seed

if TYPE_CHECKING:
    from ..scheduling.offers import Lane


class Baseline(MethodBase):
    """A method that is not MH, on ``engine`` with the schedule ``config`` (alpha, tau,
    max_new_tokens; Power-SMC also block_size) and its own ``params``."""

    name = "baseline"
    uses: tuple[str, ...] = ("alpha", "tau", "max_new_tokens")
    params_type: type

    def __init__(self, engine: Engine, config: PowerConfig | None = None, params: Any = None) -> None:
        self.engine = engine
        self.config = config if config is not None else PowerConfig()
        self.params = params if params is not None else self.params_type()
        if not isinstance(self.params, self.params_type):
            raise TypeError(f"`params` must be a {self.params_type.__name__}, got {type(self.params).__name__}")
        self.max_new_tokens = self.config.max_new_tokens
        self.alpha = float(self.config.alpha)
        self.temperature = self.config.temperature

    def describe(self) -> dict[str, object]:
        schedule = {name: getattr(self.config, name) for name in self.uses}
        out = {"method": self.name, **schedule, "tau": self.temperature, **asdict(self.params)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def run(
        self,
        prompt: Sequence[int],
        *,
        seed: int,
        prompt_id: int | str = 0,
        trace: TraceWriter | None = None,
        on_transition: OnTransition | None = None,
        resume: Checkpoint | None = None,
        info: Mapping[str, object] | None = None,
        lane: Lane | None = None,
    ) -> SampleResult:
        check_seed(seed)
        ids = self.check_prompt(prompt)
        rec = Recorder(self.engine, trace, lane)
        self.open_trace(rec, ids, seed, prompt_id, info, resume)  # resumed: drawn again from the start (keyed calls)
        return self.close_trace(rec, self.draw(rec, ids, seed, prompt_id))

    def draw(self, rec: Recorder, prompt: tuple[int, ...], seed: int, prompt_id: int | str) -> ChainState:
        """The response state, its calls recorded in ``rec`` (and its own records in ``rec.trace``)."""
        raise NotImplementedError
