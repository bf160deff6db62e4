"""The registry: every MH kernel, rule and baseline by name.

* a **kernel** (:class:`KernelSpec`) is an MH transition: its name, the dataclass of its
  own parameters, and how to make it from (alpha, tau, params);
* a **rule** (:class:`RuleSpec`) is how the K transitions of a stage run: its planner
  factory and the keys it couples with (``sequential`` is PowerMH, one call each);
* a **baseline** (:class:`BaselineSpec`) is a test-time method that is not MH;
* a **method** is what a run uses: a kernel (run by a rule) or a baseline.

The registry sits low in the package: it knows kernels (it registers the built-in ones),
while the planners and the baselines register themselves when their packages load
(``import presto_sgl`` loads both). The front ends' flat options are generated from the
declared fields of the configs and of every registered kernel and baseline
(:func:`presto_sgl.config.parameters`), so a new kernel is one :func:`register_kernel`
call, and it appears as a ``--method`` choice with its flags, as ``serve`` request fields
and as ``power_gen`` keyword arguments::

    register_kernel(KernelSpec("mykernel", MyParams, lambda alpha, tau, p: MyKernel(alpha, tau, p.knob),
                               "my kernel: one line for --help"))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import ConfigError
from .fields import params_of
from .kernels.entropycut import EntropyCutKernel, EntropyCutParams
from .kernels.multitry import MultiTryKernel, MultiTryParams
from .kernels.powermh import PowerMHKernel, PowerMHParams

Keying = Literal["path", "step"]


@dataclass(frozen=True)
class KernelSpec:
    name: str
    params: type  # a frozen Validated dataclass of the kernel's own parameters (fields by `option`)
    make: Callable[[float, float, Any], Any]  # (alpha, tau, params) -> the Kernel
    doc: str  # one line: the --method help


@dataclass(frozen=True)
class RuleSpec:
    name: str
    keying: Keying | None  # the keys the rule couples with (None: either; docs/design.md §4)
    planner: Callable[[Any], Any]  # the predictor (or None) -> the rule's Planner, with a fixed budget
    doc: str
    predicts: bool = False  # the rule needs a predictor with a fixed budget too (a cost-aware budget always has one)


@dataclass(frozen=True)
class BaselineSpec:
    name: str
    params: type  # a frozen Validated dataclass of the baseline's own parameters
    make: Callable[[Any, Any], Any]  # (engine, BaselineConfig) -> the Method
    uses: tuple[str, ...]  # the Target fields it reads (alpha, max_new_tokens, ...); others are refused
    doc: str
    check: Callable[[Any], None] | None = None  # (BaselineConfig): checks across its fields


KERNELS: dict[str, KernelSpec] = {}
RULES: dict[str, RuleSpec] = {}
BASELINES: dict[str, BaselineSpec] = {}
RESERVED: set[str] = {"method", "seed", "prompt"}
"""Parameter names no kernel or baseline may declare: the configs' own (added by
:mod:`presto_sgl.config`) and the front ends'."""


def declared() -> dict[str, str]:
    """Every parameter a kernel or baseline declares -> the method that declares it."""
    specs: tuple[KernelSpec | BaselineSpec, ...] = (*KERNELS.values(), *BASELINES.values())
    return {p.name: spec.name for spec in specs for p in params_of(spec.params)}


def _check_new(kind: str, name: str, params: type | None) -> None:
    if not isinstance(name, str) or not name.isidentifier() or name in KERNELS or name in BASELINES or name in RULES:
        raise ValueError(f"cannot register {kind} {name!r}: the name is taken or not an identifier")
    if params is not None:
        taken = RESERVED | set(declared())
        clash = [p.name for p in params_of(params) if p.name in taken]
        if clash:
            raise ValueError(
                f"cannot register {kind} {name!r}: its parameters {clash} are already declared; rename them"
            )


def register_kernel(spec: KernelSpec) -> KernelSpec:
    """Add an MH kernel: it becomes a ``--method`` choice, its parameters CLI flags, ``serve``
    request fields and ``power_gen`` keyword arguments."""
    _check_new("kernel", spec.name, spec.params)
    KERNELS[spec.name] = spec
    return spec


def register_rule(spec: RuleSpec) -> RuleSpec:
    _check_new("rule", spec.name, None)
    RULES[spec.name] = spec
    return spec


def register_baseline(spec: BaselineSpec) -> BaselineSpec:
    _check_new("baseline", spec.name, spec.params)
    BASELINES[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a kernel, rule or baseline (tests that register toys clean up with this)."""
    for table in (KERNELS, RULES, BASELINES):
        table.pop(name, None)


def methods() -> tuple[str, ...]:
    """Every method name: the kernels, then the baselines."""
    return (*KERNELS, *BASELINES)


def spec_of(method: str) -> KernelSpec | BaselineSpec:
    """The registry entry of ``method``, or a ConfigError naming it."""
    spec = (KERNELS.get(method) or BASELINES.get(method)) if isinstance(method, str) else None
    if spec is None:
        raise ConfigError("method", method, f"{{method}} (={method!r}) must be one of {list(methods())}")
    return spec


def make_kernel(config: Any) -> Any:
    """The MH kernel of a PowerConfig's ``kernel`` (its name and ``params``), for its ``target``
    (an EOS-terminated one needs a kernel with an ``ends`` field)."""
    name, target = config.kernel.kernel, config.target
    kernel = KERNELS[name].make(float(target.alpha), config.temperature, config.kernel.params)
    if not target.ends:
        return kernel
    names = {f.name for f in dataclasses.fields(kernel)} if dataclasses.is_dataclass(kernel) else set()
    if "ends" not in names:
        raise ConfigError(
            "target",
            target.target,
            f"kernel {name!r} has no EOS-terminated form (no `ends` "
            "field); use {target='fixed'} or a kernel that has one (powermh, entropycut, multitry)",
        )
    return dataclasses.replace(kernel, ends=True)


def current_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run record or manifest config in today's words. Before the registry, ``sampler`` was
    "sequential" or "presto" beside ``kernel`` (an MH run) or a baseline's name, and best-of-N's
    ``best_of`` was ``n``; a record written since is returned as it is."""
    out = dict(record)
    if "sampler" not in out or "method" in out:
        return out
    sampler = out.pop("sampler")
    if sampler in ("sequential", "presto"):
        out["method"] = out.pop("kernel", "powermh")
        if sampler == "sequential":
            out["rule"] = "sequential"
    else:
        out["method"] = sampler
        if sampler == "bestofn" and "n" in out:
            out["best_of"] = out.pop("n")
    return out


register_kernel(KernelSpec("powermh", PowerMHParams, lambda alpha, tau, p: PowerMHKernel(alpha, tau), "uniform cuts"))
register_kernel(
    KernelSpec(
        "entropycut",
        EntropyCutParams,
        lambda alpha, tau, p: EntropyCutKernel(alpha, tau, p.beta),
        "cuts where the p0 entropy rises; needs an engine with entropy",
    )
)
register_kernel(
    KernelSpec(
        "multitry",
        MultiTryParams,
        lambda alpha, tau, p: MultiTryKernel(alpha, p.try_temperatures, p.tries),
        "multiple-try Metropolis: --tries candidates per transition at temperatures drawn from --try-temperatures",
    )
)
