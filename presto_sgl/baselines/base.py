"""What the baselines share: validation, keyed seeds, timed and recorded calls.

Their calls are plain generation calls, recorded as block extensions (``kind="extend"``):
``extend_calls`` and ``extend_time_s`` of their metrics are the whole cost, and
``model_calls`` (MH calls) is 0. Like the MH samplers they generate exactly
``max_new_tokens`` tokens (no EOS stop); the answer ends at the first stop token.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engines.base import Completion, Engine, Request
from ..executor import Recorder
from ..metrics import CallRecord, RequestRecord
from ..samplers import check_prompt


def positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` (={value!r}) must be an integer >= 1")
    return value


def positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"`{name}` (={value!r}) must be a number > 0")
    return float(value)


class Baseline:
    name = "baseline"

    def __init__(self, engine: Engine, *, max_new_tokens: int, alpha: float = 4.0, tau: float | None = None) -> None:
        self.engine = engine
        self.max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        self.alpha = positive_float("alpha", alpha)
        self.temperature = positive_float("tau", tau) if tau is not None else 1.0 / self.alpha

    def describe(self) -> dict[str, object]:
        return {"sampler": self.name, "alpha": self.alpha, "tau": self.temperature, "max_new_tokens": self.max_new_tokens}

    def check_prompt(self, prompt: Sequence[int]) -> tuple[int, ...]:
        return check_prompt(self.engine, prompt, self.max_new_tokens)

    def _generate(self, rec: Recorder, stage: int, cut: int, requests: list[Request]) -> list[Completion]:
        comps, elapsed = rec.call(requests)
        records = tuple(RequestRecord(None, cut, len(r.prefix), r.max_new_tokens, c.cached_tokens, True, r.temperature, r.seed)
                        for r, c in zip(requests, comps))
        rec.record_call(CallRecord(len(rec.calls), stage, "extend", 0, records, elapsed))
        return comps
