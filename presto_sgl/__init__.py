"""presto-sgl: exact, fast power sampling (PowerMH with PreSTO prefetching) for LLMs.

Layers (docs/design.md): ``kernels`` (the MH kernels), ``planners`` (which requests a
round sends), ``walker`` (which path MH takes), ``executor`` and ``samplers`` (the block
schedule and the rounds), ``engines`` (the token-level seam), ``predictor``, ``trace``.
"""

from .config import PowerConfig, PrestoConfig, sampling_configs
from .engines.base import Completion, Engine, EngineCapabilities, Request
from .errors import BackendUnavailable, CapabilityError, EngineError
from .kernels import EntropyCutKernel, Kernel, MultiTryKernel, PowerMHKernel, accepts, log_acceptance, mh_step
from .metrics import PromptMetrics
from .samplers import PowerMH, PrestoPowerMH, Sampler, SampleResult, make_kernel, make_sampler
from .state import ChainState
from .trace import TraceWriter, metrics_from_trace, read_trace

__all__ = [
    "BackendUnavailable",
    "CapabilityError",
    "ChainState",
    "Completion",
    "Engine",
    "EngineCapabilities",
    "EngineError",
    "EntropyCutKernel",
    "Kernel",
    "MultiTryKernel",
    "PowerConfig",
    "PowerMH",
    "PowerMHKernel",
    "PrestoConfig",
    "PrestoPowerMH",
    "PromptMetrics",
    "Request",
    "SampleResult",
    "Sampler",
    "TraceWriter",
    "accepts",
    "log_acceptance",
    "make_kernel",
    "make_sampler",
    "metrics_from_trace",
    "mh_step",
    "read_trace",
    "sampling_configs",
]
__version__ = "0.1.0"
