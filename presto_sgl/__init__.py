"""presto-sgl: exact, fast power sampling (PowerMH and PreSTO-PowerMH) for LLMs."""

from .config import PowerConfig, PrestoConfig
from .engines.base import Completion, Engine, EngineCapabilities, EngineError, Request
from .kernel import accepts, log_acceptance, mh_step
from .metrics import PromptMetrics, TraceWriter, metrics_from_trace, read_trace
from .samplers import PowerMH, PrestoPowerMH, SampleResult, make_sampler
from .state import ChainState

__all__ = [
    "ChainState",
    "Completion",
    "Engine",
    "EngineCapabilities",
    "EngineError",
    "PowerConfig",
    "PowerMH",
    "PrestoConfig",
    "PrestoPowerMH",
    "PromptMetrics",
    "Request",
    "SampleResult",
    "TraceWriter",
    "accepts",
    "log_acceptance",
    "make_sampler",
    "metrics_from_trace",
    "mh_step",
    "read_trace",
]
__version__ = "0.1.0"
