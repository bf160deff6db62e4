"""presto-sgl: exact, fast power sampling (PowerMH with PreSTO prefetching) for LLMs.

Layers, lowest first (docs/design.md §9; `lint-imports` holds every import to them): errors and
the wire format; fields, then constraints; ``chain`` (the chain's state, keys, metrics, trace);
``kernels`` (the MH kernels and their proposals), ``predictor``, ``hub``; ``engines`` (the
token-level seam); ``registry``, ``config``; ``planners`` (which requests a round sends);
``execution`` (the walker: which path MH takes, the executor of a stage's rounds, resume,
choices, offers); ``methods``; ``samplers``, ``baselines``, ``models``; ``build``,
``scheduling`` (many chains on one engine), ``catalog`` (engines by name), ``tasks``; the front
ends (``program``: SGLang's ``power_gen``, ``serve``, ``evaluation``, ``cli``) and the
server-side plugins (``server_side``, which know only the wire format).

One public way to build a sampler: ``Sampler(engine, *sampling_configs(rule, **options))``, or
``Sampler(engine, PowerConfig(Target(...), KernelConfig(...)), PrestoConfig(rule, ...))``;
``make_method(engine, options)`` builds any method (a sampler or a baseline) from flat options.

The package root imports nothing until a name is read from it (PEP 562): the server plugins,
loaded inside SGLang's and vLLM's processes, import only what they use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

_WHERE = {
    ".build": ("make_method",),
    ".chain.metrics": ("PromptMetrics",),
    ".chain.state": ("ChainState",),
    ".chain.trace": ("TraceWriter", "metrics_from_trace", "read_trace"),
    ".config": (
        "BaselineConfig",
        "KernelConfig",
        "MethodConfig",
        "PowerConfig",
        "PrestoConfig",
        "Target",
        "method_config",
        "sampling_configs",
    ),
    ".engines.base": ("Completion", "Engine", "EngineCapabilities", "Request"),
    ".errors": ("BackendUnavailable", "CapabilityError", "ConfigError", "EngineError"),
    ".kernels": (
        "EntropyCutKernel",
        "Kernel",
        "MultiTryKernel",
        "PowerMHKernel",
        "accepts",
        "log_acceptance",
        "mh_step",
    ),
    ".methods": ("Method", "SampleResult"),
    ".registry": (
        "BaselineSpec",
        "KernelSpec",
        "RuleSpec",
        "make_kernel",
        "register_baseline",
        "register_kernel",
        "register_rule",
    ),
    ".samplers": ("Sampler",),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "BackendUnavailable",
    "BaselineConfig",
    "BaselineSpec",
    "CapabilityError",
    "ChainState",
    "Completion",
    "ConfigError",
    "Engine",
    "EngineCapabilities",
    "EngineError",
    "EntropyCutKernel",
    "Kernel",
    "KernelConfig",
    "KernelSpec",
    "Method",
    "MethodConfig",
    "MultiTryKernel",
    "PowerConfig",
    "PowerMHKernel",
    "PrestoConfig",
    "PromptMetrics",
    "Request",
    "RuleSpec",
    "SampleResult",
    "Sampler",
    "Target",
    "TraceWriter",
    "__version__",
    "accepts",
    "log_acceptance",
    "make_kernel",
    "make_method",
    "method_config",
    "metrics_from_trace",
    "mh_step",
    "read_trace",
    "register_baseline",
    "register_kernel",
    "register_rule",
    "sampling_configs",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'presto_sgl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from .build import make_method
    from .chain.metrics import PromptMetrics
    from .chain.state import ChainState
    from .chain.trace import TraceWriter, metrics_from_trace, read_trace
    from .config import (
        BaselineConfig,
        KernelConfig,
        MethodConfig,
        PowerConfig,
        PrestoConfig,
        Target,
        method_config,
        sampling_configs,
    )
    from .engines.base import Completion, Engine, EngineCapabilities, Request
    from .errors import BackendUnavailable, CapabilityError, ConfigError, EngineError
    from .kernels import EntropyCutKernel, Kernel, MultiTryKernel, PowerMHKernel, accepts, log_acceptance, mh_step
    from .methods import Method, SampleResult
    from .registry import (
        BaselineSpec,
        KernelSpec,
        RuleSpec,
        make_kernel,
        register_baseline,
        register_kernel,
        register_rule,
    )
    from .samplers import Sampler
