"""Frozen, validated configuration: the schedule (:class:`PowerConfig`, with its kernel's own
parameters) and how its transitions run (:class:`PrestoConfig`); and the front ends' flat
options (:func:`parameters`, :func:`sampling_configs`).

Every field is declared with :func:`~presto_sgl.fields.option` (its default, help and
check); a bad value is a :class:`~presto_sgl.errors.ConfigError` naming the parameter, its
value and the fix. Kernels and rules are named through :mod:`presto_sgl.registry`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from . import registry
from .errors import ConfigError
from .fields import (
    TEMPERATURE_RANGE,
    Param,
    Validated,
    boolean,
    integer,
    nonempty_text,
    number,
    one_of,
    option,
    params_of,
)

Keying = registry.Keying


TARGETS = ("fixed", "eos")


def _kernels() -> tuple[str, ...]:
    return tuple(registry.KERNELS)


def _rules() -> tuple[str, ...]:
    return tuple(registry.RULES)


@dataclass(frozen=True)
class PowerConfig(Validated):
    """PowerMH's schedule: target pi_alpha(x) ∝ p0(x)^alpha, n/B stages of K steps each, run
    by the MH ``kernel`` with its own ``params`` (default: the kernel's defaults).

    ``tau`` is the proposal temperature and defaults to 1/alpha. ``max_new_tokens`` must
    be a positive multiple of ``block_size`` (stage l targets the first l*B tokens).
    ``target``: "fixed" samples responses of exactly T tokens (the paper's); "eos" samples
    responses that end at the model's first stop token or at T (docs/design.md §2.1).
    """

    alpha: float = option(
        4.0,
        "power alpha of the target p0^alpha",
        number(
            TEMPERATURE_RANGE[0],
            strict=False,
            high=TEMPERATURE_RANGE[1],
            what="power sampling uses alpha > 1; 1/alpha is the default tau",
            example=4.0,
        ),
    )
    max_new_tokens: int = option(64, "response length, a multiple of --block-size")  # checked in _check
    block_size: int = option(16, "tokens per stage", integer(1, example=16))
    steps: int = option(10, "MH transitions per stage, K", integer(0, "MH transitions per block"))
    tau: float | None = option(
        None,
        "proposal temperature (default: 1/alpha)",
        number(TEMPERATURE_RANGE[0], strict=False, high=TEMPERATURE_RANGE[1], optional="the default 1/alpha"),
    )
    keying: Keying = option(
        "step",
        "decision keys; for --rule sequential (default: step); bfs and step imply path and step",
        one_of(("path", "step")),
        choices=("path", "step"),
    )
    kernel: str = option("powermh", "the MH kernel", one_of(_kernels), choices=_kernels)
    target: str = option(
        "fixed",
        "the response space: fixed = exactly --max-new-tokens tokens (the paper's); eos = "
        "responses that end at the model's first stop token (or at --max-new-tokens), so short "
        "answers stop paying for T tokens",
        one_of(TARGETS),
        choices=TARGETS,
    )
    params: Any = None  # the kernel's parameters (its registry entry's dataclass); None: its defaults

    def _check(self) -> None:
        if not self.max_new_tokens_ok():
            n, b = self.max_new_tokens, self.block_size
            hint = b * (max(1, -(-n // b)) if isinstance(n, int) and not isinstance(n, bool) else 1)
            raise ConfigError(
                "max_new_tokens",
                n,
                f"{{max_new_tokens}} (={n!r}) must be a positive multiple of "
                f"{{block_size}} (={b}); use e.g. {{max_new_tokens={hint}}}",
            )
        kind = registry.KERNELS[self.kernel].params
        if self.params is None:
            object.__setattr__(self, "params", kind())
        elif not isinstance(self.params, kind):
            raise ConfigError(
                "params",
                self.params,
                f"{{params}} must be a {kind.__name__} for kernel {self.kernel!r}, got a {type(self.params).__name__}",
            )

    def max_new_tokens_ok(self) -> bool:
        n = self.max_new_tokens
        return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and n % self.block_size == 0

    @property
    def temperature(self) -> float:
        """The proposal temperature tau (1/alpha unless given)."""
        return float(self.tau) if self.tau is not None else 1.0 / float(self.alpha)

    @property
    def num_stages(self) -> int:
        return self.max_new_tokens // self.block_size

    @property
    def ends(self) -> bool:
        """The EOS-terminated target: responses end at their first stop token."""
        return self.target == "eos"


def capped_blocks(cap: int, block: int) -> tuple[int, int]:
    """(T, B) of a chain whose answer is capped at ``cap`` tokens (serve's ``max_tokens``,
    ``power_gen``'s): B = min(block, cap), so a larger block is one block of the cap, and T
    the smallest multiple of B >= cap (the response is cut back to the cap)."""
    block = min(block, cap)
    return -(-cap // block) * block, block


@dataclass(frozen=True)
class PrestoConfig(Validated):
    """How the K transitions run: ``rule`` and the per-call request ``budget`` (N_pf).

    ``sequential`` is plain PowerMH, one model call per transition (the budget is unused;
    either keying). The PreSTO rules: ``bfs`` is the paper's breadth-first rule over the path-keyed tree; ``predictive``
    selects the path-keyed requests that maximize the predicted reaching weight (paper
    Eq. 19); ``step`` issues one shared request per depth (step keys) and carries valid
    proposals over rounds. ``cost_aware`` (any PreSTO rule) picks the number of requests per
    call, up to ``budget``, from a fitted time-per-call model (a budget policy composed with
    the rule, :mod:`presto_sgl.planners.budget`): where proposals carry over (``step``) the
    number of depths that minimizes the predicted call time to finish the stage (a rollout),
    where rounds renew (``bfs``, ``predictive``) the best predicted transitions per second. ``predictor`` is
    "default" (shipped with the package) or the path of a saved predictor; ``online``
    refits it on the decisions the run has already scored.
    """

    rule: str = option(
        "step",
        "sequential = PowerMH, one call per transition; PreSTO: bfs (the paper's default), "
        "predictive (the paper's DP over predicted branch probabilities; path keys) or step (one shared "
        "request per depth; step keys)",
        one_of(_rules),
        choices=_rules,
    )
    budget: int = option(20, "PreSTO requests per model call, N_pf", integer(1, "requests per model call", 20))
    predictor: str = option(
        "default",
        "eps-certainty predictor for --rule predictive and --cost-aware: 'default' "
        "(shipped with presto-sgl, fitted on SmolLM2 traces) or a file written by `presto-sgl "
        "fit-predictor`",
        nonempty_text("'default' or the path of a saved predictor"),
        metavar="default|FILE",
    )
    online: bool = option(
        False,
        "refit the predictor during the run on the decisions already scored, starting from --predictor",
        boolean,
        flag="--online-predictor",
    )
    cost_aware: bool = option(
        False,
        "PreSTO rules: choose the requests per call, up to --budget, from the measured "
        "call times (step: the fewest predicted seconds to finish the stage; bfs, predictive: "
        "the most predicted transitions per second)",
        boolean,
    )

    def _check(self) -> None:
        if self.cost_aware and self.rule == "sequential":
            raise ConfigError(
                "cost_aware",
                True,
                "{cost_aware} applies to the PreSTO rules (bfs, predictive, step), not rule='sequential'",
            )

    @property
    def keying(self) -> Keying | None:
        """The keys the rule needs (None: sequential runs with either)."""
        return registry.RULES[self.rule].keying

    @property
    def sequential(self) -> bool:
        return self.rule == "sequential"


SCHEDULE = tuple(p.name for p in params_of(PowerConfig))
"""PowerConfig's declared parameters (the kernel's own come from its registry entry)."""
PRESTO = tuple(f.name for f in fields(PrestoConfig))
registry.RESERVED.update(SCHEDULE, PRESTO, ("params",))

METHOD = Param(
    "method",
    "powermh",
    "what the run uses: an MH kernel (run by --rule) or a baseline that is not MH",
    "registry",
    choices=registry.methods,
)
"""The ``method`` option (a kernel or a baseline), which no dataclass declares."""


def parameters() -> list[Param]:
    """Every declared parameter front ends expose, once each: ``method``, the schedule
    (PowerConfig), PrestoConfig's, then each registered kernel's and baseline's own."""
    out = [METHOD, *(p for p in params_of(PowerConfig) if p.name != "kernel"), *params_of(PrestoConfig)]
    specs: tuple[registry.KernelSpec | registry.BaselineSpec, ...] = (
        *registry.KERNELS.values(),
        *registry.BASELINES.values(),
    )
    for spec in specs:
        out += params_of(spec.params)
    return out


def _route(method: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schedule fields, the method's own fields) of flat ``options`` for ``method``;
    PrestoConfig's are left out. An option nobody declares, or one of another method, is a
    ConfigError naming it."""
    own = {p.name for p in params_of(registry.spec_of(method).params)}
    belongs = registry.declared()
    schedule, mine = {}, {}
    for name, value in options.items():
        if name in own:
            mine[name] = value
        elif name in SCHEDULE:
            schedule[name] = value
        elif name in belongs:
            raise ConfigError(
                name,
                value,
                f"{{{name}}} is a parameter of {belongs[name]}, not of {method!r}; drop it "
                f"or use {{method={belongs[name]}}}",
            )
        elif name not in PRESTO and name != "method":
            raise ConfigError(
                name, value, f"unknown parameter {{{name}}}; the parameters are {[p.name for p in parameters()]}"
            )
    return schedule, mine


def split_options(method: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """(schedule fields, the method's own params instance) of flat ``options`` for ``method``
    (:func:`_route`)."""
    schedule, mine = _route(method, options)
    if method in registry.KERNELS:
        schedule["kernel"] = method
    return schedule, registry.spec_of(method).params(**mine)


def check_keying(need: Keying | None, keying: str | None, subject: str) -> None:
    """ConfigError unless ``keying`` fits the keys ``need`` of ``subject`` (a rule, or an
    injected planner; None: either): the one place a rule's keying is checked."""
    if keying is not None and need is not None and keying != need:
        raise ConfigError(
            "keying",
            keying,
            f"{{keying}} (={keying!r}) does not fit {subject}, which couples with "
            f"{need} keys; drop keying, or use {{keying={need!r}}}",
        )


def sampling_configs(rule: str = "step", **options: Any) -> tuple[PowerConfig, PrestoConfig]:
    """The validated (PowerConfig, PrestoConfig) of flat ``options``: the schedule's fields
    (alpha, tau, max_new_tokens, block_size, steps, keying, kernel), the kernel's own
    (e.g. ``beta`` for entropycut), and PrestoConfig's (budget, predictor, online,
    cost_aware). ``keying`` defaults to the rule's own (``step`` for ``sequential``, which
    runs with either). An option that belongs to no one, or to another kernel, is a
    ConfigError naming it (:func:`split_options`)."""
    if "sampler" in options:  # the pre-registry name of `kernel`
        warnings.warn("sampling_configs(sampler=...) is deprecated; use kernel=...", DeprecationWarning, stacklevel=2)
        options["kernel"] = options.pop("sampler")
    presto = PrestoConfig(rule=rule, **{k: options.pop(k) for k in PRESTO if k in options and k != "rule"})
    check_keying(presto.keying, options.get("keying"), f"`rule` {rule!r}")
    kernel = options.get("kernel", "powermh")
    if not isinstance(kernel, str) or kernel not in registry.KERNELS:
        raise ConfigError("kernel", kernel, f"{{kernel}} (={kernel!r}) must be one of {list(registry.KERNELS)}")
    schedule, params = split_options(kernel, options)
    schedule.setdefault("keying", presto.keying or "step")
    return PowerConfig(**schedule, params=params), presto


def config_options(config: PowerConfig, presto: PrestoConfig | None = None) -> dict[str, Any]:
    """The flat options of configs, rule included: what a run's description reports."""
    out: dict[str, Any] = {name: getattr(config, name) for name in SCHEDULE}
    out |= {p.name: getattr(config.params, p.name) for p in params_of(type(config.params))}
    if presto is not None:
        out |= {name: getattr(presto, name) for name in PRESTO}
    return out


def with_options(
    config: PowerConfig, presto: PrestoConfig, overrides: Mapping[str, Any]
) -> tuple[PowerConfig, PrestoConfig]:
    """``config`` / ``presto`` with ``overrides`` (flat options) applied as typed replaces, each
    object checked again as it is built: a kernel change starts from the new kernel's default
    parameters, a rule change from the new rule's keys (unless ``keying`` is given)."""
    options = dict(overrides)
    rule = options.pop("rule", presto.rule)
    new_presto = dataclasses.replace(presto, rule=rule, **{k: options.pop(k) for k in PRESTO if k in options})
    check_keying(new_presto.keying, options.get("keying"), f"`rule` {rule!r}")
    if rule != presto.rule:
        options.setdefault("keying", new_presto.keying or "step")
    kernel = options.pop("kernel", config.kernel)
    if not isinstance(kernel, str) or kernel not in registry.KERNELS:
        raise ConfigError("kernel", kernel, f"{{kernel}} (={kernel!r}) must be one of {list(registry.KERNELS)}")
    schedule, mine = _route(kernel, options)
    own = registry.KERNELS[kernel].params
    params = dataclasses.replace(config.params, **mine) if kernel == config.kernel else own(**mine)
    return dataclasses.replace(config, kernel=kernel, params=params, **schedule), new_presto
