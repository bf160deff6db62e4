"""Frozen, validated configuration, one object per concept:

* :class:`Target`: what a chain samples (alpha, the length T, the block size B, fixed or eos);
* :class:`KernelConfig`: the MH transition (the kernel, its own parameters, tau, K per stage);
* :class:`PowerConfig`: a chain, the two of them;
* :class:`PrestoConfig`: how the transitions run (rule, budget, cost policy; the keys derived
  from the rule), which never changes the chain (paper Prop. 1);
* :class:`BaselineConfig`: a baseline's own (its target, tau, its parameters);
* :class:`MethodConfig`: a validated method, a kernel's two configs and rule or a baseline's.

A front end's input (CLI flags, a request's fields, ``power_gen``'s arguments) names declared
parameters (:func:`parameters`); :func:`method_config` builds the objects from it once, each
field applied to the object whose declaration owns it, as a typed replace of a base's objects
(a server's defaults) or of the defaults. Each object describes itself (``describe()``).

Every field is declared with :func:`~presto_sgl.fields.option` (its default, help and
check); a bad value is a :class:`~presto_sgl.errors.ConfigError` naming the parameter, its
value and the fix. Kernels and rules are named through :mod:`presto_sgl.registry`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any

from . import registry
from .chain.keys import Keying
from .constraints import Constraint
from .errors import ConfigError
from .fields import (
    TEMPERATURE_RANGE,
    Param,
    Validated,
    boolean,
    integer,
    is_finite_number,
    is_int,
    nonempty_text,
    number,
    one_of,
    option,
    params_of,
)

ENDINGS = ("fixed", "eos")


def _kernels() -> tuple[str, ...]:
    return tuple(registry.KERNELS)


def _rules() -> tuple[str, ...]:
    return tuple(registry.RULES)


def _tau() -> Any:
    return option(
        None,
        "proposal temperature (default: 1/alpha)",
        number(TEMPERATURE_RANGE[0], strict=False, high=TEMPERATURE_RANGE[1], optional="the default 1/alpha"),
    )


def _temperature(tau: float | None, alpha: float) -> float:
    return float(tau) if tau is not None else 1.0 / float(alpha)


@dataclass(frozen=True)
class Target(Validated):
    """What a chain samples: pi_alpha(x) ∝ p0(x)^alpha, approached in stages of ``block_size``
    tokens (stage l targets the first l*B; None: one stage, the whole response).

    ``ending``: "fixed" samples responses of exactly ``max_new_tokens`` tokens (the paper's);
    "eos" responses that end at the model's first stop token or at T (docs/design.md §2.1).
    ``max_new_tokens`` is a positive multiple of ``block_size``. ``constraint``: pi_alpha
    restricted to the responses a :class:`~presto_sgl.constraints.Constraint` allows
    (structured power sampling, docs/design.md §2.2; EOS-terminated target only).
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
    block_size: int | None = option(16, "tokens per stage", integer(1, example=16, optional="one stage"))
    ending: str = option(
        "fixed",
        "the response space: fixed = exactly --max-new-tokens tokens (the paper's); eos = "
        "responses that end at the model's first stop token (or at --max-new-tokens), so short "
        "answers stop paying for T tokens",
        one_of(ENDINGS),
        choices=ENDINGS,
    )
    _: KW_ONLY
    constraint: Constraint | None = None

    def _check(self) -> None:
        c = self.constraint
        if c is not None and not isinstance(c, Constraint):
            raise ConfigError(
                "constraint", c, f"{{constraint}} must be a presto_sgl.Constraint, got {type(c).__name__}"
            )
        if c is not None and self.ending != "eos":
            raise ConfigError(
                "ending",
                self.ending,
                f"a constraint ({c.describe()}) needs {{ending='eos'}}: a fixed-target response has exactly "
                "max_new_tokens tokens and never ends, so it cannot end where the constraint allows",
            )
        n, b = self.max_new_tokens, self.block_size
        if not is_int(n) or n < 1 or (b is not None and n % b):
            hint = (b or 1) * (max(1, -(-n // (b or 1))) if is_int(n) else 1)
            raise ConfigError(
                "max_new_tokens",
                n,
                f"{{max_new_tokens}} (={n!r}) must be a positive multiple of "
                f"{{block_size}} (={b}); use e.g. {{max_new_tokens={hint}}}",
            )

    def describe(self) -> dict[str, object]:
        """The declared fields, and the constraint's own description when there is one."""
        out = super().describe()
        if self.constraint is not None:
            out["constraint"] = self.constraint.describe()
        return out

    @property
    def block(self) -> int:
        """B: the tokens of a stage."""
        return self.block_size if self.block_size is not None else self.max_new_tokens

    @property
    def num_stages(self) -> int:
        return self.max_new_tokens // self.block

    @property
    def ends(self) -> bool:
        """The EOS-terminated target: responses end at their first stop token."""
        return self.ending == "eos"


@dataclass(frozen=True)
class KernelConfig(Validated):
    """The MH transition: the registered ``kernel`` with its own ``params`` (default: its
    defaults), run ``steps`` (K) times per stage, proposing from q_tau (``tau`` defaults to 1/alpha)."""

    name: str = option("powermh", "the MH kernel", one_of(_kernels), choices=_kernels)
    steps: int = option(10, "MH transitions per stage, K", integer(0, "MH transitions per block"))
    tau: float | None = _tau()
    params: Any = None  # the kernel's parameters (its registry entry's dataclass); None: its defaults

    def _check(self) -> None:
        object.__setattr__(self, "params", _own_params(self.name, registry.KERNELS[self.name].params, self.params))

    def describe(self) -> dict[str, object]:
        """The kernel (as ``method``), K, tau as given, and the kernel's own parameters."""
        return {"method": self.name, "steps": self.steps, "tau": self.tau, **self.params.describe()}


def _own_params(method: str, kind: type, params: Any) -> Any:
    if params is None:
        return kind()
    if not isinstance(params, kind):
        raise ConfigError(
            "params",
            params,
            f"{{params}} must be a {kind.__name__} for {method!r}, got a {type(params).__name__}",
        )
    return params


@dataclass(frozen=True)
class PowerConfig:
    """A power-sampling chain: its :class:`Target` and the :class:`KernelConfig` that moves it.
    (How the transitions run, which never changes the chain, is :class:`PrestoConfig`.)"""

    target: Target = field(default_factory=Target)
    kernel: KernelConfig = field(default_factory=KernelConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.target, Target) or not isinstance(self.kernel, KernelConfig):
            raise TypeError(
                "PowerConfig takes a Target and a KernelConfig, "
                f"got {type(self.target).__name__} and {type(self.kernel).__name__}"
            )

    @property
    def temperature(self) -> float:
        """The proposal temperature tau (1/alpha unless given)."""
        return _temperature(self.kernel.tau, self.target.alpha)

    def describe(self) -> dict[str, object]:
        """The kernel (as ``method``), the target, the kernel's fields with tau resolved."""
        kernel = self.kernel.describe()
        return {"method": kernel.pop("method"), **self.target.describe(), **kernel, "tau": self.temperature}


@dataclass(frozen=True)
class BaselineConfig(Validated):
    """A baseline (a method that is not MH): its name, its :class:`Target` (the fields it
    ``uses``), the temperature ``tau`` of its draws (default 1/alpha) and its own ``params``."""

    baseline: str
    target: Target = field(default_factory=Target)
    tau: float | None = _tau()
    params: Any = None

    def _check(self) -> None:
        spec = registry.BASELINES.get(self.baseline)
        if spec is None:
            raise ConfigError(
                "method", self.baseline, f"{{method}} (={self.baseline!r}) must be one of {list(registry.BASELINES)}"
            )
        object.__setattr__(self, "params", _own_params(self.baseline, spec.params, self.params))
        if spec.check is not None:
            spec.check(self)

    @property
    def temperature(self) -> float:
        """tau (1/alpha unless given)."""
        return _temperature(self.tau, self.target.alpha)

    def describe(self) -> dict[str, object]:
        """The baseline (as ``method``), the target fields it uses, tau resolved, its own parameters."""
        target = self.target.describe()
        uses = {name: target[name] for name in registry.BASELINES[self.baseline].uses}
        return {"method": self.baseline, **uses, "tau": self.temperature, **self.params.describe()}


def alpha_of_temperature(temperature: Any, alpha: Any = None) -> float | None:
    """The alpha a sampler's ``temperature`` asks for, as ``serve`` and ``power_gen`` read it: t > 0
    sets alpha = 1/t (the target p0^alpha is p0 at sequence-level temperature 1/alpha); t = 0,
    what harnesses and programs send for greedy decoding, or None keeps the configured alpha
    (None is returned). A ConfigError names ``temperature`` outside the range, or when ``alpha``
    is given too and differs."""
    if temperature is None or (is_finite_number(temperature) and temperature == 0):
        return None
    low, high = TEMPERATURE_RANGE
    if not is_finite_number(temperature) or not low <= temperature <= high:
        raise ConfigError(
            "temperature",
            temperature,
            f"{{temperature}} (={temperature!r}) must be 0 or in [{low:g}, {high:g}] (it sets alpha = "
            "1/temperature, and the proposal temperature 1/alpha must be in that range)",
        )
    out = 1.0 / temperature
    if alpha is not None and not (is_finite_number(alpha) and abs(float(alpha) - out) <= 1e-9 * out):
        raise ConfigError(
            "temperature",
            temperature,
            f"{{temperature}} (={temperature!r}) sets alpha = 1/temperature = {out:g}, but {{alpha}} "
            f"(={alpha!r}) is given too; give one of them",
        )
    return out


def capped(cap: int, block: Any) -> dict[str, Any]:
    """The target's length fields for an answer capped at ``cap`` tokens (serve's ``max_tokens``,
    ``power_gen``'s): one stage of ``cap`` tokens where ``block`` is None, else B = min(block, cap)
    and T the smallest multiple of B >= cap (the response is cut back to the cap). A ``block``
    that is not a positive integer is left for :class:`Target` to refuse by name."""
    if not (is_int(block) and block >= 1):
        return {"max_new_tokens": cap}
    b = min(block, cap)
    return {"max_new_tokens": -(-cap // b) * b, "block_size": b}


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
    refits it on the decisions the run has already scored. ``keying`` is derived from the rule
    (sequential, which couples with either, takes it from the caller; default step).
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
    _: KW_ONLY
    cost_aware: bool = option(
        False,
        "PreSTO rules: choose the requests per call, up to --budget, from the measured "
        "call times (step: the fewest predicted seconds to finish the stage; bfs, predictive: "
        "the most predicted transitions per second)",
        boolean,
    )

    keying: Keying = option(
        None,
        "decision keys: the rule's (bfs, predictive: path; step: step); --rule sequential, which "
        "couples with either, takes path or step (default: step)",
        one_of(("path", "step"), optional=True),
        choices=("path", "step"),
    )

    def _check(self) -> None:
        if self.cost_aware and self.rule == "sequential":
            raise ConfigError(
                "cost_aware",
                True,
                "{cost_aware} applies to the PreSTO rules (bfs, predictive, step), not rule='sequential'",
            )
        need = registry.RULES[self.rule].keying
        check_keying(need, self.keying, f"`rule` {self.rule!r}")
        object.__setattr__(self, "keying", self.keying or need or "step")

    @property
    def sequential(self) -> bool:
        return self.rule == "sequential"

    def describe(self) -> dict[str, object]:
        """The rule and its keys, and for a PreSTO rule how it runs (budget, predictor, online,
        cost_aware), which a sequential run does not use."""
        return {"rule": self.rule, "keying": self.keying} if self.sequential else super().describe()


SERVER_SIDE = frozenset({"predictor", "online"})
"""PrestoConfig's fields that only the process running the chains sets (its predictor file, its
learner): ``serve``'s flags and the library's, never a request or a ``power_gen`` call."""

PRESTO = tuple(f.name for f in fields(PrestoConfig))

METHOD = Param(
    "method",
    "powermh",
    "what the run uses: an MH kernel (run by --rule) or a baseline that is not MH",
    "registry",
    choices=registry.methods,
)
"""The ``method`` option (a kernel or a baseline), which no dataclass declares."""


def parameters() -> list[Param]:
    """Every declared parameter front ends expose, once each: ``method``, the target's, the
    kernel's shared ones (steps, tau), PrestoConfig's, then each registered kernel's and
    baseline's own."""
    out = [METHOD, *params_of(Target), *(p for p in params_of(KernelConfig) if p.name != "name")]
    out += params_of(PrestoConfig)
    specs: tuple[registry.KernelSpec | registry.BaselineSpec, ...] = (
        *registry.KERNELS.values(),
        *registry.BASELINES.values(),
    )
    for spec in specs:
        out += params_of(spec.params)
    return out


@dataclass(frozen=True)
class MethodConfig:
    """A validated method: its name and, for an MH kernel, its PowerConfig and PrestoConfig,
    for a baseline its BaselineConfig (``presto`` None)."""

    method: str
    config: PowerConfig | BaselineConfig
    presto: PrestoConfig | None = None

    @property
    def is_kernel(self) -> bool:
        return self.presto is not None


CONFIGS = ("Target", "KernelConfig", "PrestoConfig")
"""The classes whose declared fields every kernel shares (a declaration's ``owner``)."""


def method_config(fields: Mapping[str, Any], base: MethodConfig | None = None) -> MethodConfig:
    """The method a front end's ``fields`` ask for, each object built once: ``fields`` are
    declared parameters by name (``method``, ``rule``, the target's, the kernel's, PrestoConfig's
    and the method's own), each applied to the object whose declaration owns it, as a typed
    replace of ``base``'s objects (a server's defaults) or of the defaults. A new kernel starts
    from its own default parameters, a new rule from its own keys (unless ``keying`` is given).
    A field nobody declares, or one of another method, is a ConfigError naming it; a baseline
    leaves out the schedule fields it does not use (one set of fields runs every method) and
    refuses a rule's."""
    method = fields.get("method", base.method if base is not None else METHOD.default)
    spec = registry.spec_of(method)
    own = _by_owner(method, spec.params.__name__, fields)
    if isinstance(spec, registry.BaselineSpec):
        return _baseline(method, spec, own)
    mine = own.get(spec.params.__name__, {})
    if base is None or not isinstance(base.config, PowerConfig) or base.presto is None:
        target = Target(**own["Target"])
        kernel = KernelConfig(method, **own["KernelConfig"], params=spec.params(**mine))
        return MethodConfig(method, PowerConfig(target, kernel), PrestoConfig(**own["PrestoConfig"]))
    was = base.config.kernel
    params = dataclasses.replace(was.params, **mine) if method == was.name else spec.params(**mine)
    kernel = dataclasses.replace(was, name=method, params=params, **own["KernelConfig"])
    presto = own["PrestoConfig"]
    if presto.get("rule", base.presto.rule) != base.presto.rule:
        presto.setdefault("keying", None)  # the new rule's keys
    config = PowerConfig(dataclasses.replace(base.config.target, **own["Target"]), kernel)
    return MethodConfig(method, config, dataclasses.replace(base.presto, **presto))


def _by_owner(method: str, mine: str, fields: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``fields`` grouped by the class that declares each (:data:`CONFIGS` and ``mine``, the
    method's own parameters' class), or a ConfigError naming a field no one or another method declares."""
    owners = {p.name: p.owner for p in parameters()}
    out: dict[str, dict[str, Any]] = {owner: {} for owner in (*CONFIGS, mine)}
    for name, value in fields.items():
        owner = owners.get(name)
        if name == METHOD.name:
            continue
        if owner is None:
            raise ConfigError(
                name, value, f"unknown parameter {{{name}}}; the parameters are {[p.name for p in parameters()]}"
            )
        if owner not in out:
            other = registry.declared()[name]
            raise ConfigError(
                name,
                value,
                f"{{{name}}} is a parameter of {other}, not of {method!r}; drop it or use {{method={other}}}",
            )
        out[owner][name] = value
    return out


def _baseline(method: str, spec: registry.BaselineSpec, own: dict[str, dict[str, Any]]) -> MethodConfig:
    """A baseline's config from its fields by owner: the target fields it ``uses`` (one stage
    unless it uses ``block_size``), tau and its own; a rule's fields refused (``keying`` ignored)."""
    rule = {k: v for k, v in own["PrestoConfig"].items() if k != "keying"}
    if rule:
        name = next(iter(rule))
        raise ConfigError(
            name,
            rule[name],
            f"{{{name}}} applies to the MH kernels {list(registry.KERNELS)}, not to the baseline {method!r}; drop it",
        )
    target = {k: v for k, v in own["Target"].items() if k in spec.uses}
    target.setdefault("block_size", Target.block_size if "block_size" in spec.uses else None)
    tau = {k: v for k, v in own["KernelConfig"].items() if k == "tau"}
    params = spec.params(**own.get(spec.params.__name__, {}))
    return MethodConfig(method, BaselineConfig(method, Target(**target), **tau, params=params))


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


def sampling_configs(rule: str = "step", **fields: Any) -> tuple[PowerConfig, PrestoConfig]:
    """The (PowerConfig, PrestoConfig) of an MH kernel (``method``, default powermh) run by
    ``rule`` with ``fields`` (:func:`method_config`'s): the library's shorthand for a sampler,
    ``Sampler(engine, *sampling_configs(rule, **fields))``."""
    m = method_config({"rule": rule, **fields})
    if not isinstance(m.config, PowerConfig) or m.presto is None:
        raise ConfigError(
            "method", m.method, f"{{method}} (={m.method!r}) is a baseline; sampling_configs makes an MH chain"
        )
    return m.config, m.presto
