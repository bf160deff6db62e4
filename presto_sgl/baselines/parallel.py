"""Low-temperature sampling and best-of-N (paper Case Study 8), one call each.

Low temperature: one response from q_tau, tau = 1/alpha (the token-level power, which
is not p0^alpha over sequences). Best-of-N: N responses from q_tau in one call, keeping
the one with the highest sequence score, the sum over its answer tokens (up to and
including the first stop token, as if sampling had stopped there) of log q_tau
(``select="logq"``, the paper's choice) or of log p0 (``select="logp"``); ties go to
the first drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engines.base import Completion, Engine, Request
from ..executor import Recorder
from ..keys import ChainKeys
from ..metrics import summarize
from ..samplers import SampleResult
from ..state import ChainState
from ..trace import TraceWriter
from .base import Baseline, positive_int

SELECT = ("logq", "logp")


class LowTemperature(Baseline):
    name = "lowtemp"

    def run(self, prompt: Sequence[int], *, seed: int, prompt_id: int | str = 0,
            trace: TraceWriter | None = None, on_transition=None) -> SampleResult:
        ids = self.check_prompt(prompt)
        rec = Recorder(self.engine, trace)
        req = Request(ids, self.max_new_tokens, self.temperature, ChainKeys(seed, prompt_id).extension_seed(1))
        (comp,) = self._generate(rec, 1, 0, [req])
        return SampleResult(_state(ids, comp), summarize(rec.calls, rec.nodes))


class BestOfN(Baseline):
    name = "bestofn"

    def __init__(self, engine: Engine, *, n: int = 8, select: str = "logq", stop_token_ids: Sequence[int] | None = None,
                 **kw) -> None:
        super().__init__(engine, **kw)
        self.n = positive_int("n", n)
        if select not in SELECT:
            raise ValueError(f"`select` (={select!r}) must be one of {list(SELECT)}")
        self.select = select
        stops = stop_token_ids if stop_token_ids is not None else getattr(engine, "stop_token_ids", None)
        self.stop_token_ids = frozenset(stops or ())

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "n": self.n, "select": self.select}

    def score(self, comp: Completion) -> float:
        values = comp.logq if self.select == "logq" else comp.logp
        end = next((i + 1 for i, t in enumerate(comp.tokens) if t in self.stop_token_ids), len(comp.tokens))
        return sum(values[:end])

    def run(self, prompt: Sequence[int], *, seed: int, prompt_id: int | str = 0,
            trace: TraceWriter | None = None, on_transition=None) -> SampleResult:
        ids = self.check_prompt(prompt)
        keys = ChainKeys(seed, prompt_id)
        rec = Recorder(self.engine, trace)
        reqs = [Request(ids, self.max_new_tokens, self.temperature, keys.decision(1, f"best-of:{i}").seed)
                for i in range(self.n)]
        comps = self._generate(rec, 1, 0, reqs)
        scores = [self.score(c) for c in comps]
        best = max(range(self.n), key=lambda i: (scores[i], -i))
        if trace:
            trace.write("best_of", {"scores": scores, "kept": best, "select": self.select})
        return SampleResult(_state(ids, comps[best]), summarize(rec.calls, rec.nodes))


def _state(prompt: tuple[int, ...], comp: Completion) -> ChainState:
    return ChainState(prompt, comp.tokens, comp.logq, comp.logp)
