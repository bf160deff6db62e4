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

from ..chain.keys import ChainKeys
from ..chain.state import ChainState
from ..config import BaselineConfig
from ..engines.base import Completion, Engine, Request
from ..execution.executor import Recorder
from ..methods import extend
from .base import Baseline


class LowTemperature(Baseline):
    name = "lowtemp"

    def response(self, rec: Recorder, prompt: tuple[int, ...], seed: int, prompt_id: int | str) -> ChainState:
        req = Request(prompt, self.max_new_tokens, self.temperature, ChainKeys(seed, prompt_id).extension_seed(1))
        (comp,) = extend(rec, 1, 0, [req])
        return _state(prompt, comp)


class BestOfN(Baseline):
    """``stop_token_ids`` end each draw's answer (default: the engine text view's)."""

    name = "bestofn"

    def __init__(
        self, engine: Engine, config: BaselineConfig | None = None, *, stop_token_ids: Sequence[int] | None = None
    ) -> None:
        super().__init__(engine, config)
        self.stop_token_ids = frozenset(engine.text.stop_ids if stop_token_ids is None else stop_token_ids)

    def score(self, comp: Completion) -> float:
        values = comp.logq if self.params.select == "logq" else comp.logp
        end = next((i + 1 for i, t in enumerate(comp.tokens) if t in self.stop_token_ids), len(comp.tokens))
        return sum(values[:end])

    def response(self, rec: Recorder, prompt: tuple[int, ...], seed: int, prompt_id: int | str) -> ChainState:
        keys = ChainKeys(seed, prompt_id)
        n = self.params.best_of
        reqs = [
            Request(prompt, self.max_new_tokens, self.temperature, keys.decision(1, f"best-of:{i}").seed)
            for i in range(n)
        ]
        comps = extend(rec, 1, 0, reqs)
        scores = [self.score(c) for c in comps]
        best = max(range(n), key=lambda i: (scores[i], -i))
        if rec.trace:
            rec.trace.write("best_of", {"scores": scores, "kept": best, "select": self.params.select})
        return _state(prompt, comps[best])


def _state(prompt: tuple[int, ...], comp: Completion) -> ChainState:
    return ChainState(prompt, comp.tokens, comp.logq, comp.logp)
