"""Power-SMC (Azizi et al. 2026; paper Case Study 8): P particles grown in blocks from q_tau.

The target after t response tokens is gamma_t(x) = p0(x_{1:t})^{a(t)}, with the exponent
ramped from 1 to alpha over the first ``ramp_tokens`` tokens, a(t) = 1 + (alpha - 1)
min(1, t / ramp_tokens) (a = alpha throughout when ``ramp_tokens`` = 0). Growing a
particle by a block b from q_tau multiplies its weight by

    gamma_{t+B}(x, b) / (gamma_t(x) q_tau(b | x))
      = p0(x)^{a(t+B) - a(t)} p0(b | x)^{a(t+B)} / q_tau(b | x)       (in logs below).

All P blocks of a step are one engine call. When the effective sample size
(sum w)^2 / sum w^2 falls below ``ess_fraction`` * P, the particles are resampled
(systematic, one keyed uniform) and their weights reset. The response is one particle
drawn by its final weight (keyed). A finite-P approximation of p0^alpha, not exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..chain.keys import ChainKeys
from ..chain.state import ChainState
from ..config import BaselineConfig
from ..engines.base import Engine, Request
from ..execution.executor import Recorder
from ..methods import extend
from .base import Baseline
from .params import ramp_tokens


def systematic(weights: Sequence[float], u: float) -> list[int]:
    """Systematic resampling: indices i with multiplicity ~ P w_i, from one uniform u in (0, 1]."""
    n, total = len(weights), sum(weights)
    out, cum, i = [], weights[0] / total, 0
    for k in range(n):
        point = (k + 1 - u) / n  # in [0, 1): (k + u') / n with u' = 1 - u in [0, 1)
        while point >= cum and i < n - 1:
            i += 1
            cum += weights[i] / total
        out.append(i)
    return out


def pick(weights: Sequence[float], u: float) -> int:
    """One index drawn with probability proportional to ``weights``, from a uniform u in (0, 1]."""
    target, cum = u * sum(weights), 0.0
    for i, w in enumerate(weights):
        cum += w
        if target <= cum:
            return i
    return len(weights) - 1


def normalized(logw: Sequence[float]) -> list[float]:
    top = max(logw)
    w = [math.exp(x - top) for x in logw]
    s = sum(w)
    return [x / s for x in w]


class PowerSMC(Baseline):
    """Power-SMC; ``ramp_tokens`` None is the paper's 400 of 1024, scaled to ``max_new_tokens``."""

    name = "powersmc"
    uses = ("alpha", "max_new_tokens", "block_size")

    def __init__(self, engine: Engine, config: BaselineConfig | None = None) -> None:
        super().__init__(engine, config)
        p = self.params
        self.particles, self.block_size, self.ess_fraction = p.particles, self.config.target.block, p.ess_fraction
        self.ramp_tokens = ramp_tokens(self.config)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "ramp_tokens": self.ramp_tokens}

    def exponent(self, t: int) -> float:
        return self.alpha if self.ramp_tokens == 0 else 1 + (self.alpha - 1) * min(1.0, t / self.ramp_tokens)

    def response(self, rec: Recorder, prompt: tuple[int, ...], seed: int, prompt_id: int | str) -> ChainState:
        keys = ChainKeys(seed, prompt_id)
        P, B = self.particles, self.block_size
        states = [ChainState(prompt)] * P
        logw = [0.0] * P
        steps = self.max_new_tokens // B
        for step in range(1, steps + 1):
            t = (step - 1) * B
            reqs = [
                Request(s.context(t), B, self.temperature, keys.decision(step, f"smc:{j}").seed)
                for j, s in enumerate(states)
            ]
            comps = extend(rec, step, t, reqs)
            a0, a1 = self.exponent(t), self.exponent(t + B)
            for j, c in enumerate(comps):
                logw[j] += (a1 - a0) * sum(states[j].logp) + a1 * sum(c.logp) - sum(c.logq)
                states[j] = states[j].replace_suffix(t, c.tokens, c.logq, c.logp)
            w = normalized(logw)
            ess = 1.0 / sum(x * x for x in w)
            resampled = step < steps and ess < self.ess_fraction * P
            if resampled:
                picks = systematic(w, keys.decision(step, "smc:resample").uniform)
                states, logw = [states[i] for i in picks], [0.0] * P
            if rec.trace:
                rec.trace.write("smc_step", {"step": step, "ess": ess, "resampled": resampled})
        kept = pick(normalized(logw), keys.decision(steps, "smc:select").uniform)
        return states[kept]
