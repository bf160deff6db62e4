"""What the exactness suites run over: MH kernels x rules x engines.

A new kernel (EntropyCut, MultiTryMH, ...) joins every exactness test by adding a
:class:`KernelCase` to :data:`KERNELS`: its factory from the PowerConfig, its exact
transition matrix on the enumerable reference LM, and a sabotage of its acceptance
(the suites must then fail: they have power against it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from presto_sgl import PowerConfig, PrestoConfig, Sampler, registry, sampling_configs
from presto_sgl.chain.keys import Keying
from presto_sgl.config import method_config
from presto_sgl.engines.base import Engine
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.kernels import (
    EntropyCutKernel,
    Kernel,
    MultiTryKernel,
    PowerMHKernel,
    entropycut,
    mh,
    multitry,
    powermh,
)
from tests.support import exact
from tests.support.timing import stub_planner


@dataclass(frozen=True)
class KernelCase:
    name: str
    make: Callable[[PowerConfig], Kernel]
    matrix: Callable[[ReferenceLM, tuple[int, ...], int, Kernel], np.ndarray]
    """(lm, prompt, T, kernel) -> the kernel's exact transition matrix over exact.sequences(V, T)."""
    sabotage: Callable[[pytest.MonkeyPatch], None]
    """Break the kernel's acceptance (the enumerated tests must then reject it)."""
    sabotaged_matrix: Callable[[ReferenceLM, tuple[int, ...], int, Kernel], np.ndarray]
    """The sabotaged kernel's exact matrix (``matrix`` is written from the kernel's definition,
    so it does not see the library's sabotaged code)."""
    ending: Callable[..., np.ndarray]
    """(lm, prompt, H, stop, kernel, sabotaged) -> the exact matrix under the EOS-terminated
    target at horizon H over exact.continuations(V, H, stop); ``sabotaged``: the law of
    ``ending_sabotage``'s kernel."""
    ending_sabotage: Callable[[pytest.MonkeyPatch], None]
    """Drop the EOS-terminated target's length term (the ending suites must then fail)."""
    state_cut: bool = False
    """The cut law depends on the state's values (EntropyCut): on an engine whose batched and
    single-row log-probs differ in the last bits, an argmin of the race can flip, so bit-wise
    coupling needs a bit-exact engine (the reference engine)."""

    def __str__(self) -> str:
        return self.name

    def options(self, **power: object) -> dict[str, object]:
        """Flat options for this kernel: ``power`` less other kernels' parameters, with ``method``."""
        other = {k for k, owner in registry.declared().items() if owner != self.name}
        return {"method": self.name, **{k: v for k, v in power.items() if k not in other}}

    def config(self, **power: object) -> PowerConfig:
        """The PowerConfig of this kernel with ``power`` (the schedule and, of kernels' parameters, its own)."""
        options = self.options(**power)
        config = method_config(options).config
        assert isinstance(config, PowerConfig)
        return config


def _flip_powermh_q_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """PowerMH with the sign of its proposal (q) term flipped."""
    orig = mh.log_acceptance

    def flipped(lq_x: float, lq_y: float, lp_x: float, lp_y: float, alpha: float, extra: float = 0.0) -> float:
        return orig(lq_y, lq_x, lp_x, lp_y, alpha, extra)

    monkeypatch.setattr(mh, "log_acceptance", flipped)


def _flip_entropycut_cut_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """EntropyCut with its reverse-over-forward cut-law term inverted (forward over reverse)."""
    orig = entropycut.log_cut_ratio
    monkeypatch.setattr(entropycut, "log_cut_ratio", lambda x, y, c, beta: -orig(x, y, c, beta))


def _wrong_multitry_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """MultiTryMH weighting every draw by p0^alpha / q at the first temperature of the set,
    not by the mixture Q it was drawn from (a multiple-try weight a naive port would use)."""

    def first_temperature(logp, logq_at, alpha):
        return alpha * math.fsum(logp) - math.fsum(row[0] for row in logq_at)

    monkeypatch.setattr(multitry, "log_weight", first_temperature)


def _drop_uniform_length_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """The uniform cut's law taken as constant under the EOS-terminated target: log 1/L(z)
    read as 0, so PowerMH loses its L(x)/L(y) term and MultiTryMH's weights their lambda."""
    monkeypatch.setattr(powermh, "log_uniform_cut", lambda length: 0.0)
    monkeypatch.setattr(multitry, "log_uniform_cut", lambda length: 0.0)


def _same_length_entropy_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """EntropyCut's reverse cut law read over the current state's positions, as if the
    proposal had its length (its entropies cut to, or padded with the current's to, L(x))."""
    orig = entropycut.log_cut_ratio
    monkeypatch.setattr(entropycut, "log_cut_ratio", lambda x, y, c, beta: orig(x, _as_long_as(y, x), c, beta))


def _as_long_as(h_y, h_x):
    return (tuple(h_y) + tuple(h_x[len(h_y) :]))[: len(h_x)]


def _powermh_ending(lm, prompt, H, stop, kernel, sabotaged=False):
    same = (lambda h_y, h_x: exact.uniform_cut_law(h_x)) if sabotaged else None
    return exact.ending_matrix(lm, prompt, H, stop, kernel.alpha, kernel.temperature, exact.uniform_cut_law, same)


def _entropycut_ending(lm, prompt, H, stop, kernel, sabotaged=False):
    law = exact.entropy_cut_law(kernel.beta)
    same = (lambda h_y, h_x: law(_as_long_as(h_y, h_x))) if sabotaged else None
    return exact.ending_matrix(lm, prompt, H, stop, kernel.alpha, kernel.temperature, law, same)


def _multitry_ending(lm, prompt, H, stop, kernel, sabotaged=False):
    return exact.ending_multitry_matrix(lm, prompt, H, stop, kernel, length_term=not sabotaged)


KERNELS = [
    KernelCase(
        "powermh",
        lambda cfg: PowerMHKernel(cfg.target.alpha, cfg.temperature, ends=cfg.target.ends),
        exact.powermh_matrix,  # type: ignore[arg-type]  # takes the PowerMHKernel that make() builds
        _flip_powermh_q_term,
        lambda lm, prompt, T, kernel: exact.powermh_matrix(lm, prompt, T, kernel, flipped=True),  # type: ignore[arg-type]  # takes the PowerMHKernel that make() builds
        _powermh_ending,
        _drop_uniform_length_term,
    ),
    KernelCase(
        "entropycut",
        lambda cfg: EntropyCutKernel(cfg.target.alpha, cfg.temperature, cfg.kernel.params.beta, ends=cfg.target.ends),
        exact.entropycut_matrix,
        _flip_entropycut_cut_term,
        lambda lm, prompt, T, kernel: exact.entropycut_matrix(lm, prompt, T, kernel, inverted=True),
        _entropycut_ending,
        _same_length_entropy_law,
        state_cut=True,
    ),
    KernelCase(
        "multitry",
        lambda cfg: MultiTryKernel(
            cfg.target.alpha, cfg.kernel.params.try_temperatures, cfg.kernel.params.tries, ends=cfg.target.ends
        ),
        exact.multitry_matrix,
        _wrong_multitry_weight,
        lambda lm, prompt, T, kernel: exact.multitry_matrix(lm, prompt, T, kernel, wrong_weight=True),
        _multitry_ending,
        _drop_uniform_length_term,
    ),
]


@dataclass(frozen=True)
class RuleCase:
    """A way to run the K transitions: sequential PowerMH with either keying, or a PreSTO
    rule (predictive: online cut-dependent stub predictor; cost-aware: that predictor and a
    synthetic clock, so the number of requests per call varies deterministically)."""

    name: str
    rule: str
    keying: str
    cost_aware: bool = False

    def __str__(self) -> str:
        return self.name

    @property
    def sequential(self) -> bool:
        return self.rule == "sequential"

    def configs(self, budget: int = 20, **power: object) -> tuple[PowerConfig, PrestoConfig]:
        return sampling_configs(self.rule, keying=self.keying, budget=budget, cost_aware=self.cost_aware, **power)

    def sampler(self, engine: Engine, config: PowerConfig, presto: PrestoConfig, kernel: Kernel) -> Sampler:
        planner = None if self.sequential else stub_planner(presto)
        return Sampler(engine, config, presto, kernel=kernel, planner=planner)


RULES = {
    r.name: r
    for r in (
        RuleCase("sequential-path", "sequential", "path"),
        RuleCase("sequential-step", "sequential", "step"),
        RuleCase("bfs", "bfs", "path"),
        RuleCase("predictive", "predictive", "path"),
        RuleCase("bfs-cost", "bfs", "path", cost_aware=True),
        RuleCase("predictive-cost", "predictive", "path", cost_aware=True),
        RuleCase("step", "step", "step"),
        RuleCase("step-cost", "step", "step", cost_aware=True),
    )
}
PRESTO_RULES = [r for r in RULES.values() if not r.sequential]
"""The rules that prefetch (coupled against sequential PowerMH with their keying)."""


def sequential_sampler(engine: Engine, config: PowerConfig, kernel: Kernel, keying: Keying) -> Sampler:
    """Sequential PowerMH (one call per transition) with ``method`` and ``keying``."""
    return Sampler(engine, config, PrestoConfig("sequential", keying=keying), kernel=kernel)
