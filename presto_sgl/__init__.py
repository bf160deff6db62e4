"""presto-sgl: exact, fast power sampling (PowerMH with PreSTO prefetching) for LLMs.

Layers (docs/design.md): ``kernels`` (the MH kernels), ``planners`` (which requests a
round sends), ``walker`` (which path MH takes), ``executor`` and ``samplers`` (the block
schedule and the rounds), ``engines`` (the token-level seam), ``predictor``, ``trace``;
``registry`` names every kernel, rule and baseline, and the front ends are generated from it.

One public way to build a sampler: ``Sampler(engine, *sampling_configs(rule, **options))``;
``make_method(engine, options)`` builds any method (a sampler or a baseline) from flat options.
"""

from . import baselines as _baselines  # noqa: F401 (registers the baselines)
from .config import PowerConfig, PrestoConfig, sampling_configs
from .engines.base import Completion, Engine, EngineCapabilities, Request
from .errors import BackendUnavailable, CapabilityError, ConfigError, EngineError
from .kernels import EntropyCutKernel, Kernel, MultiTryKernel, PowerMHKernel, accepts, log_acceptance, mh_step
from .methods import Method, SampleResult
from .metrics import PromptMetrics
from .options import make_method, method_config
from .registry import BaselineSpec, KernelSpec, RuleSpec, make_kernel, register_baseline, register_kernel, register_rule
from .samplers import Sampler
from .state import ChainState
from .trace import TraceWriter, metrics_from_trace, read_trace

__all__ = [
    "BackendUnavailable",
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
    "KernelSpec",
    "Method",
    "MultiTryKernel",
    "PowerConfig",
    "PowerMHKernel",
    "PrestoConfig",
    "PromptMetrics",
    "Request",
    "RuleSpec",
    "SampleResult",
    "Sampler",
    "TraceWriter",
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
__version__ = "0.1.0"
