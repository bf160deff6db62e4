"""Frozen, validated configuration. Errors name the argument, its value and the fix."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Keying = Literal["path", "step"]
SamplerName = Literal["powermh", "entropycut", "multitry"]

SAMPLERS: tuple[str, ...] = ("powermh", "entropycut", "multitry")
"""The MH kernels (docs/design.md §3): uniform cuts, cuts where the p0 entropy rises, or
multiple-try Metropolis over m candidates at mixed temperatures."""
Rule = Literal["sequential", "bfs", "predictive", "step"]

RULES: tuple[str, ...] = ("sequential", "bfs", "predictive", "step")
"""How the K transitions of a stage run: one call each (sequential PowerMH) or a PreSTO rule."""

RULE_KEYING: dict[str, Keying | None] = {"sequential": None, "bfs": "path", "predictive": "path", "step": "step"}
"""The keying each rule couples with (None: either; docs/design.md §4)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or float (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_beta(beta: object) -> None:
    """ValueError naming `beta` unless it is a finite number >= 0 (EntropyCut's cut-law power)."""
    if not is_finite_number(beta) or beta < 0:  # type: ignore[operator]
        raise ValueError(f"`beta` (={beta!r}) must be a finite number >= 0 (EntropyCut's cut-law power), e.g. beta=4.0")


def check_multitry(tries: object, temperatures: object, name: str = "temperatures") -> None:
    """ValueError naming the argument unless m >= 1 and ``name`` (the set S) is a non-empty
    set of finite temperatures > 0."""
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise ValueError(f"`tries` (={tries!r}) must be an integer >= 1 (MultiTryMH's candidates per transition), e.g. tries=4")
    example = f"e.g. {name}=(0.25, 0.5, 1.0)"
    if isinstance(temperatures, (str, bytes)) or not isinstance(temperatures, Sequence) or not temperatures:
        raise ValueError(f"`{name}` (={temperatures!r}) must be a non-empty sequence of temperatures > 0, {example}")
    bad = [t for t in temperatures if not is_finite_number(t) or t <= 0]
    if bad:
        raise ValueError(f"`{name}` (={tuple(temperatures)!r}) has {bad}: each must be a finite number > 0, {example}")
    if len(set(temperatures)) != len(temperatures):
        raise ValueError(f"`{name}` (={tuple(temperatures)!r}) repeats a value; list each temperature once")

@dataclass(frozen=True)
class PowerConfig:
    """PowerMH: target pi_alpha(x) ∝ p0(x)^alpha, block schedule of n/B stages, K steps each.

    ``tau`` is the proposal temperature and defaults to 1/alpha. ``max_new_tokens`` must
    be a positive multiple of ``block_size`` (stage l targets the first l*B tokens).
    """

    alpha: float = 4.0
    max_new_tokens: int = 64
    block_size: int = 16
    steps: int = 10
    tau: float | None = None
    keying: Keying = "step"
    sampler: SamplerName = "powermh"
    beta: float = 4.0  # EntropyCut: the cut law's power, lambda ∝ Delta^beta
    tries: int = 4  # MultiTryMH: candidates per transition (m)
    try_temperatures: tuple[float, ...] = (0.25, 0.5, 1.0)  # MultiTryMH: each draw's temperature set

    def __post_init__(self) -> None:
        if not is_finite_number(self.alpha) or self.alpha <= 0:
            raise ValueError(f"`alpha` (={self.alpha!r}) must be a finite number > 0; power sampling uses alpha > 1, e.g. alpha=4.0")
        if self.tau is not None and (not is_finite_number(self.tau) or self.tau <= 0):
            raise ValueError(f"`tau` (={self.tau!r}) must be a finite number > 0, or None for the default 1/alpha")
        if not _is_int(self.block_size) or self.block_size < 1:
            raise ValueError(f"`block_size` (={self.block_size!r}) must be a positive integer, e.g. 16")
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1 or self.max_new_tokens % self.block_size:
            hint = self.block_size * (max(1, -(-self.max_new_tokens // self.block_size)) if _is_int(self.max_new_tokens) else 1)
            raise ValueError(
                f"`max_new_tokens` (={self.max_new_tokens!r}) must be a positive multiple of "
                f"`block_size` (={self.block_size}); use e.g. max_new_tokens={hint}"
            )
        if not _is_int(self.steps) or self.steps < 0:
            raise ValueError(f"`steps` (={self.steps!r}) must be an integer >= 0 (MH transitions per block)")
        if self.keying not in ("path", "step"):
            raise ValueError(f"`keying` (={self.keying!r}) must be 'path' or 'step'")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"`sampler` (={self.sampler!r}) must be one of {list(SAMPLERS)}")
        check_beta(self.beta)
        check_multitry(self.tries, self.try_temperatures, "try_temperatures")
        object.__setattr__(self, "try_temperatures", tuple(float(t) for t in self.try_temperatures))

    @property
    def temperature(self) -> float:
        """The proposal temperature tau (1/alpha unless given)."""
        return float(self.tau) if self.tau is not None else 1.0 / float(self.alpha)

    @property
    def num_stages(self) -> int:
        return self.max_new_tokens // self.block_size


@dataclass(frozen=True)
class PrestoConfig:
    """How the K transitions run: ``rule`` and the per-call request ``budget`` (N_pf).

    ``sequential`` is plain PowerMH, one model call per transition (the budget is unused;
    either keying). The PreSTO rules: ``bfs`` is the paper's breadth-first rule over the path-keyed tree; ``predictive``
    selects the path-keyed requests that maximize the predicted reaching weight (paper
    Eq. 19); ``step`` issues one shared request per depth (step keys) and carries valid
    proposals over rounds. ``cost_aware`` (any PreSTO rule) picks the number of requests per
    call, up to ``budget``, from a fitted time-per-call model: for ``step`` the number of
    depths that minimizes the predicted call time to finish the stage (a rollout;
    :mod:`presto_sgl.planners.costaware`), for ``bfs`` and ``predictive`` the budget of the
    best predicted transitions per second (:mod:`presto_sgl.planners.pathcost`). ``predictor`` is
    "default" (shipped with the package) or the path of a saved predictor; ``online``
    refits it on the decisions the run has already scored.
    """

    rule: Rule = "step"
    budget: int = 20
    predictor: str = "default"
    online: bool = False
    cost_aware: bool = False

    def __post_init__(self) -> None:
        if self.rule not in RULE_KEYING:
            raise ValueError(f"`rule` (={self.rule!r}) must be one of {list(RULES)}")
        if not _is_int(self.budget) or self.budget < 1:
            raise ValueError(f"`budget` (={self.budget!r}) must be an integer >= 1 (requests per model call), e.g. 20")
        if not isinstance(self.predictor, str) or not self.predictor:
            raise ValueError(f"`predictor` (={self.predictor!r}) must be 'default' or the path of a saved predictor")
        for name in ("online", "cost_aware"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` (={getattr(self, name)!r}) must be True or False")
        if self.cost_aware and self.rule == "sequential":
            raise ValueError("`cost_aware` applies to the PreSTO rules (bfs, predictive, step), not rule='sequential'")

    @property
    def keying(self) -> Keying | None:
        """The keys the rule needs (None: sequential runs with either)."""
        return RULE_KEYING[self.rule]

    @property
    def sequential(self) -> bool:
        return self.rule == "sequential"


def sampling_configs(
    rule: str = "step",
    *,
    keying: str | None = None,
    budget: int = 20,
    predictor: str = "default",
    online: bool = False,
    cost_aware: bool = False,
    **power: object,
) -> tuple[PowerConfig, PrestoConfig]:
    """The validated (PowerConfig, PrestoConfig) of a sampler for ``rule``.

    ``keying`` defaults to the rule's own (``step`` for ``sequential``, which runs with
    either); one that does not fit the rule is a ValueError. ``power`` holds the
    :class:`PowerConfig` fields (alpha, tau, max_new_tokens, block_size, steps).
    """
    if rule not in RULE_KEYING:
        raise ValueError(f"`rule` (={rule!r}) must be one of {list(RULES)}")
    need = RULE_KEYING[rule]
    if keying is not None and need is not None and keying != need:
        raise ValueError(f"`keying` (={keying!r}) does not fit `rule` {rule!r}, which uses {need} keys; drop keying")
    presto = PrestoConfig(rule=rule, budget=budget, predictor=predictor, online=online, cost_aware=cost_aware)  # type: ignore[arg-type]
    config = PowerConfig(keying=keying or need or "step", **power)  # type: ignore[arg-type]
    return config, presto
