"""The library's exceptions (a leaf module: everything may import it, it imports nothing).

Bad arguments are plain ``ValueError``/``TypeError`` raised at construction, naming the
argument, its value and the fix; what an engine gets wrong at run time is an
:class:`EngineError`.
"""

from __future__ import annotations


class EngineError(RuntimeError):
    """The engine returned something the sampler cannot use (wrong lengths, NaN, ...)."""


class CapabilityError(EngineError, ValueError):
    """The engine lacks a capability the sampler needs (e.g. per-token entropy); raised
    before any model call."""


class BackendUnavailable(EngineError):
    """A server engine's backend went away and did not come back within its
    ``restart_timeout_s`` (HTTP 503 from ``presto-sgl serve``)."""
