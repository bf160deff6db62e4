"""A validated method (:class:`~presto_sgl.config.MethodConfig`, from the front end's fields by
:func:`~presto_sgl.config.method_config`) on an engine: :func:`make_method`; and the run-level
adjustments of its target the front ends share (:func:`ending_default`, :func:`constrained`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import registry
from .config import MethodConfig, PowerConfig, method_config
from .constraints import Constraint
from .engines import grammar
from .engines.base import Engine
from .errors import ConfigError
from .methods import Method
from .registry import make_kernel
from .samplers import Sampler


def ending_default(config: PowerConfig, engine: Engine) -> PowerConfig:
    """``config`` with the responses that end at the model's stop token (``ending="eos"``): the
    default where ``max_tokens`` caps an answer (``serve`` without ``--ending``, ``power_gen``),
    so a short answer stops paying for the cap on every MH step. ``config`` unchanged where the
    engine cannot end there (its model has no stop token) or the kernel has no EOS-terminated form."""
    ending = replace(config, target=replace(config.target, ending="eos"))
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


def method_under(options: Mapping[str, Any], constraint: Constraint | None) -> MethodConfig:
    """The method of flat ``options`` with its target restricted by ``constraint`` (None: the
    method as it is): the responses that end (``ending="eos"``) unless ``options`` name an
    ending, the grammar checked to compile (a ConfigError naming its kind)."""
    if constraint is None:
        return method_config(options)
    grammar.check(constraint)
    baseline = options.get("method") in registry.BASELINES
    return constrained(method_config({"ending": "eos"} | dict(options) if not baseline else options), constraint)


def make_method(engine: Engine, spec: MethodConfig | Mapping[str, Any]) -> Method:
    """The method of ``spec`` (a :class:`MethodConfig`, or flat options) on ``engine``: a
    :class:`~presto_sgl.samplers.Sampler` for a kernel, the baseline's class otherwise."""
    m = spec if isinstance(spec, MethodConfig) else method_config(spec)
    if isinstance(m.config, PowerConfig):
        return Sampler(engine, m.config, m.presto)
    return registry.BASELINES[m.method].make(engine, m.config)
