"""The library's exceptions (a leaf module: everything may import it, it imports nothing of the package).

A bad parameter is a :class:`ConfigError` (a ``ValueError``) raised at construction, with
the parameter's name and value as attributes and the fix in its message; what an engine
gets wrong at run time is an :class:`EngineError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable


class EngineError(RuntimeError):
    """The engine returned something the sampler cannot use (wrong lengths, NaN, ...)."""


class CapabilityError(EngineError, ValueError):
    """The engine lacks a capability the sampler needs (e.g. per-token entropy); raised
    before any model call."""


class BackendUnavailable(EngineError):
    """A server engine's backend went away and did not come back within its
    ``restart_timeout_s`` (HTTP 503 from ``presto-sgl serve``)."""


_NAMED = re.compile(r"\{([a-z_][a-z0-9_]*)(?:=([^{}]*))?\}")


class ConfigError(ValueError):
    """A bad parameter: ``param`` names it (the library's name), ``value`` is what was given.

    The message is a template in which parameter names are written ``{name}`` and example
    settings ``{name=value}``; :meth:`render` writes them in a front end's own terms (a
    CLI flag, a request field), so no front end rewrites message text. ``str(error)`` is
    the library's wording: `` `name` `` and ``name=value``.
    """

    def __init__(self, param: str | None, value: object, template: str) -> None:
        self.param, self.value, self.template = param, value, template
        super().__init__(self.render())

    def render(
        self, name: Callable[[str], str] = lambda p: p, assign: Callable[[str, str], str] = lambda n, v: f"{n}={v}"
    ) -> str:
        """The message with each ``{p}`` as `` `name(p)` `` and each ``{p=v}`` as ``assign(name(p), v)``."""
        return _NAMED.sub(lambda m: f"`{name(m[1])}`" if m[2] is None else assign(name(m[1]), m[2]), self.template)
