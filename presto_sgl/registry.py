"""The registry: every MH kernel, rule and baseline by name.

* a **kernel** (:class:`~presto_sgl.kernels.base.KernelSpec`) is an MH transition: its name,
  the dataclass of its own parameters, and how to make it from (alpha, tau, params);
* a **rule** (:class:`~presto_sgl.planners.base.RuleSpec`) is how the K transitions of a stage
  run: its planner factory and the keys it couples with (``sequential`` is PowerMH, one call each);
* a **baseline** (:class:`BaselineSpec`) is a test-time method that is not MH;
* a **method** is what a run uses: a kernel (run by a rule) or a baseline.

Each built-in package declares its entries as ``SPECS``: the kernels and the rules sit below
the registry, which registers theirs when it loads; the baselines sit above it (they need the
configs), and the tables load them by name on their first read (as they would a plugin), so
any front end sees every built-in whatever it imported first. The front ends' flat options are
generated from the declared fields of the configs and of every registered kernel and baseline
(:func:`presto_sgl.config.parameters`), so a new kernel is one :func:`register_kernel`
call, and it appears as a ``--method`` choice with its flags, as ``serve`` request fields
and as ``power_gen`` keyword arguments::

    register_kernel(KernelSpec("mykernel", MyParams, lambda alpha, tau, p: MyKernel(alpha, tau, p.knob),
                               "my kernel: one line for --help"))
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Generic, TypeVar

from . import kernels, planners
from .chain.keys import Keying
from .engines.base import Engine
from .errors import ConfigError
from .fields import Validated, params_of
from .kernels.base import Kernel, KernelSpec
from .methods import Method
from .planners.base import RuleSpec

__all__ = [
    "BASELINES",
    "KERNELS",
    "RULES",
    "BaselineSpec",
    "KernelSpec",
    "Keying",
    "RuleSpec",
    "make_kernel",
    "methods",
    "register_baseline",
    "register_kernel",
    "register_rule",
    "spec_of",
    "unregister",
]


@dataclass(frozen=True)
class BaselineSpec:
    name: str
    params: type[Validated]  # a frozen dataclass of the baseline's own parameters
    make: Callable[[Engine, Any], Method]  # (engine, its BaselineConfig: the configs sit above) -> the method
    uses: tuple[str, ...]  # the Target fields it reads (alpha, max_new_tokens, ...); others are refused
    _: KW_ONLY
    doc: str
    check: Callable[[Any], None] | None = None  # (BaselineConfig): checks across its fields


ABOVE = ("presto_sgl.baselines",)
"""The built-in packages above the registry, whose ``SPECS`` load on a table's first read."""

_loaded = False

S = TypeVar("S")


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in ABOVE:
            for spec in importlib.import_module(module).SPECS:
                _add(spec)


class Table(Mapping[str, S], Generic[S]):
    """Registered specs by name. Reading it first loads the built-ins of :data:`ABOVE`."""

    def __init__(self) -> None:
        self._specs: dict[str, S] = {}

    def _all(self) -> dict[str, S]:
        _load_builtins()
        return self._specs

    def __getitem__(self, name: str) -> S:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def add(self, name: str, spec: S) -> None:
        self._specs[name] = spec

    def remove(self, name: str) -> None:
        self._specs.pop(name, None)


KERNELS: Table[KernelSpec] = Table()
RULES: Table[RuleSpec] = Table()
BASELINES: Table[BaselineSpec] = Table()
RESERVED = frozenset(
    {
        *("alpha", "max_new_tokens", "block_size", "ending"),  # Target's
        *("name", "params", "steps", "tau"),  # KernelConfig's
        *("rule", "budget", "predictor", "online", "cost_aware", "keying"),  # PrestoConfig's
        *("method", "kernel", "seed", "prompt"),  # the front ends'
    }
)
"""Parameter names no kernel or baseline may declare: the configs' own and the front ends'
(tests/unit/test_registry.py keeps the configs' in step with :mod:`presto_sgl.config`)."""


def declared() -> dict[str, str]:
    """Every parameter a kernel or baseline declares -> the method that declares it."""
    specs: tuple[KernelSpec | BaselineSpec, ...] = (*KERNELS.values(), *BASELINES.values())
    return {p.name: spec.name for spec in specs for p in params_of(spec.params)}


def _check_new(kind: str, name: str, params: type | None) -> None:
    """Refuses a taken name or parameter (read from the tables as they stand: the built-ins
    load before a user's registration, see :func:`register_kernel`)."""
    tables = (KERNELS._specs, BASELINES._specs, RULES._specs)
    if not isinstance(name, str) or not name.isidentifier() or any(name in t for t in tables):
        raise ValueError(f"cannot register {kind} {name!r}: the name is taken or not an identifier")
    if params is not None:
        own = [spec.params for spec in KERNELS._specs.values()] + [spec.params for spec in BASELINES._specs.values()]
        taken = RESERVED | {p.name for cls in own for p in params_of(cls)}
        clash = [p.name for p in params_of(params) if p.name in taken]
        if clash:
            raise ValueError(
                f"cannot register {kind} {name!r}: its parameters {clash} are already declared; rename them"
            )


def register_kernel(spec: KernelSpec) -> KernelSpec:
    """Add an MH kernel: it becomes a ``--method`` choice, its parameters CLI flags, ``serve``
    request fields and ``power_gen`` keyword arguments."""
    _load_builtins()
    return _add(spec)


def register_rule(spec: RuleSpec) -> RuleSpec:
    _load_builtins()
    return _add(spec)


def register_baseline(spec: BaselineSpec) -> BaselineSpec:
    _load_builtins()
    return _add(spec)


Spec = TypeVar("Spec", KernelSpec, RuleSpec, BaselineSpec)


def _add(spec: Spec) -> Spec:
    """Register ``spec`` (the built-ins' own, while they load, and a user's after them)."""
    if isinstance(spec, KernelSpec):
        _check_new("kernel", spec.name, spec.params)
        KERNELS.add(spec.name, spec)
    elif isinstance(spec, RuleSpec):
        _check_new("rule", spec.name, None)
        RULES.add(spec.name, spec)
    else:
        _check_new("baseline", spec.name, spec.params)
        BASELINES.add(spec.name, spec)
    return spec


def unregister(name: str) -> None:
    """Remove a kernel, rule or baseline (tests that register toys clean up with this)."""
    for table in (KERNELS, RULES, BASELINES):
        table.remove(name)


def methods() -> tuple[str, ...]:
    """Every method name: the kernels, then the baselines."""
    return (*KERNELS, *BASELINES)


def spec_of(method: str) -> KernelSpec | BaselineSpec:
    """The registry entry of ``method``, or a ConfigError naming it."""
    spec = (KERNELS.get(method) or BASELINES.get(method)) if isinstance(method, str) else None
    if spec is None:
        raise ConfigError("method", method, f"{{method}} (={method!r}) must be one of {list(methods())}")
    return spec


def make_kernel(config: Any) -> Kernel:
    """The MH kernel of a PowerConfig's ``kernel`` (its name and ``params``), for its ``target``
    (an EOS-terminated one needs a kernel with an ``ends`` field)."""
    name, target = config.kernel.name, config.target
    kernel = KERNELS[name].make(float(target.alpha), config.temperature, config.kernel.params)
    if not target.ends:
        return kernel
    if not (dataclasses.is_dataclass(kernel) and "ends" in {f.name for f in dataclasses.fields(kernel)}):
        raise ConfigError(
            "ending",
            target.ending,
            f"kernel {name!r} has no EOS-terminated form (no `ends` "
            "field); use {ending='fixed'} or a kernel that has one (powermh, entropycut, multitry)",
        )
    return dataclasses.replace(kernel, ends=True)


for _kernel in kernels.SPECS:
    _add(_kernel)
for _rule in planners.SPECS:
    _add(_rule)
