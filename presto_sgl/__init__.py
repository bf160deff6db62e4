"""presto-sgl: exact, fast power sampling (PowerMH with PreSTO prefetching) for LLMs.

Layers (docs/design.md §9): ``kernels`` (the MH kernels), ``planners`` (which requests a
round sends: a rule x a budget policy), ``chain`` (the chain's state and keys, the walker:
which path MH takes, the executor and the sampler: the block schedule and the rounds, its
trace), ``engines`` (the token-level seam), ``predictor``; ``scheduling`` (many chains on one
engine), the front ends (``cli``, ``serve``, ``program``: SGLang's ``power_gen``);
``config``, ``fields`` and ``registry`` declare every parameter, kernel, rule and baseline,
and the front ends are generated from them.

One public way to build a sampler: ``Sampler(engine, *sampling_configs(rule, **options))``, or
``Sampler(engine, PowerConfig(Target(...), KernelConfig(...)), PrestoConfig(rule, ...))``;
``make_method(engine, options)`` builds any method (a sampler or a baseline) from flat options.
"""

from . import baselines as _baselines  # noqa: F401 (registers the baselines)
from . import moved as _moved
from .build import make_method, method_config
from .chain.metrics import PromptMetrics
from .chain.samplers import Sampler
from .chain.state import ChainState
from .chain.trace import TraceWriter, metrics_from_trace, read_trace
from .config import BaselineConfig, KernelConfig, PowerConfig, PrestoConfig, Target, sampling_configs
from .engines.base import Completion, Engine, EngineCapabilities, Request
from .errors import BackendUnavailable, CapabilityError, ConfigError, EngineError
from .kernels import EntropyCutKernel, Kernel, MultiTryKernel, PowerMHKernel, accepts, log_acceptance, mh_step
from .methods import Method, SampleResult
from .registry import BaselineSpec, KernelSpec, RuleSpec, make_kernel, register_baseline, register_kernel, register_rule

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
_moved.install()
