"""Flat options -> a method: what the front ends (CLI, ``serve``, ``power_gen``) build runs from.

Flat options are one mapping of the registry's parameters (:func:`presto_sgl.config.parameters`):
``method`` (a kernel or a baseline; default ``powermh``), ``rule``, the schedule, PrestoConfig's
and the method's own. :func:`method_config` validates them without touching an engine;
:func:`make_method` builds the method on one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import registry
from .config import PRESTO, BaselineConfig, PowerConfig, PrestoConfig, baseline_config, sampling_configs
from .constraints import Constraint
from .engines.base import Engine
from .errors import ConfigError
from .methods import Method
from .registry import make_kernel
from .samplers import Sampler


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


def method_config(options: Mapping[str, Any]) -> MethodConfig:
    """The validated method of flat ``options``; a ConfigError names the first bad one."""
    opts = dict(options)
    method = opts.pop("method", "powermh")
    if isinstance(method, str) and method in registry.KERNELS:
        config, presto = sampling_configs(opts.pop("rule", "step"), method=method, **opts)
        return MethodConfig(method, config, presto)
    registry.spec_of(method)  # a ConfigError naming the method unless it is a baseline
    for name in ("rule", *PRESTO):
        if name in opts and name != "keying":  # a schedule field before PrestoConfig had it: ignored, as it was
            raise ConfigError(
                name,
                opts[name],
                f"{{{name}}} applies to the MH kernels {list(registry.KERNELS)}, not "
                f"to the baseline {method!r}; drop it",
            )
    return MethodConfig(method, baseline_config(method, opts))


def ending_default(config: PowerConfig, engine: Engine) -> PowerConfig:
    """``config`` with the responses that end at the model's stop token (``target="eos"``): the
    default where ``max_tokens`` caps an answer (``serve`` without ``--target``, ``power_gen``),
    so a short answer stops paying for the cap on every MH step. ``config`` unchanged where the
    engine cannot end there (its model has no stop token) or the kernel has no EOS-terminated form."""
    ending = replace(config, target=replace(config.target, target="eos"))
    if not (engine.capabilities.stops and engine.text.stop_ids):
        return config
    try:
        make_kernel(ending)
    except ConfigError:
        return config
    return ending


def constrained(method: MethodConfig, constraint: Constraint) -> MethodConfig:
    """``method`` with its chain's target restricted by ``constraint`` (an MH chain only)."""
    arg = next(iter(constraint.describe()))
    if not isinstance(method.config, PowerConfig):
        raise ConfigError(
            arg,
            constraint.describe()[arg],
            f"{{{arg}}} constrains an MH chain's target; the baseline {method.method!r} does not sample under a "
            "constraint: use a power-sampling method (powermh, entropycut, multitry)",
        )
    return replace(method, config=replace(method.config, target=replace(method.config.target, constraint=constraint)))


def make_method(engine: Engine, spec: MethodConfig | Mapping[str, Any]) -> Method:
    """The method of ``spec`` (a :class:`MethodConfig`, or flat options) on ``engine``: a
    :class:`~presto_sgl.samplers.Sampler` for a kernel, the baseline's class otherwise."""
    m = spec if isinstance(spec, MethodConfig) else method_config(spec)
    if isinstance(m.config, PowerConfig):
        return Sampler(engine, m.config, m.presto)
    return registry.BASELINES[m.method].make(engine, m.config)
