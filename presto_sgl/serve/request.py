"""The request model's types: a :class:`Field` (one request field, declared once: its JSON Schema,
the endpoints that take it, what the server does with it), the server's :class:`Defaults` and
the :class:`ServerFacts` a field's schema depends on, and the :class:`ParamError` of a bad field.
The fields themselves are declared in :mod:`.fields`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..config import PowerConfig, PrestoConfig
from ..fields import integer
from .schema import describe, jsonable, nullable, valid

BOTH = ("completions", "chat")
LENGTH = "max_new_tokens"
"""The library's response length, the request's ``max_tokens`` (chat: or ``max_completion_tokens``)."""
MAX_LOGPROBS = 20
"""Most top alternatives per position (``logprobs`` / ``top_logprobs``), as vLLM's default."""
ROLES = ("system", "developer", "user", "assistant")
"""The chat roles a request's ``messages`` may hold."""


class ParamError(ValueError):
    """A bad request field: HTTP 400, ``param`` names the field."""

    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Defaults:
    """The server's defaults for what a request leaves out, and its limits."""

    config: PowerConfig
    presto: PrestoConfig
    seed: int | None = None  # None: a fresh seed per request (reported in the response)
    max_n: int = 16

    def __post_init__(self) -> None:
        integer(None, optional="a fresh seed per request")("seed", self.seed)
        integer(1, "chains per request")("max_n", self.max_n)


@dataclass(frozen=True)
class ServerFacts:
    """What a field's schema depends on: the server's defaults, the served model's name and
    the vocabulary (token ids' bound); None where unknown (no bound)."""

    defaults: Defaults
    model: str | None = None
    vocab: int | None = None


Schema = Callable[[ServerFacts, str], dict[str, Any]]
"""(server, kind) -> the JSON Schema of a field's non-null value."""


@dataclass(frozen=True)
class Field:
    """One request field, declared once.

    ``schema`` is what a value must be (null aside: a null field is one left out); ``doc``
    what the server does with it (the OpenAPI description and docs/serve.md's row);
    ``kinds`` the endpoints that take it; ``unsupported`` marks a field taken only at the
    values that change nothing, saying why others are refused; ``nullable`` False: the
    document lists no null (the server still reads one as the default); ``checked`` False:
    :func:`parse` does not check it against the schema (the app answers a wrong ``model``
    404; the library checks the power-sampling fields)."""

    name: str
    schema: Schema
    doc: str
    kinds: tuple[str, ...] = BOTH
    _: KW_ONLY
    unsupported: str = ""
    nullable: bool = True
    checked: bool = True

    def document(self, served: ServerFacts, kind: str) -> dict[str, Any]:
        """The field's OpenAPI schema: its value's schema and doc, null allowed unless not ``nullable``."""
        schema = {**self.schema(served, kind), "description": self.doc}
        return nullable(schema) if self.nullable else schema

    def check(self, value: Any, served: ServerFacts, kind: str) -> None:
        """ParamError naming the field unless ``value`` (not null) is valid."""
        schema = self.schema(served, kind)
        if valid(schema, value):
            return
        shown = json.dumps(value)[:80] if jsonable(value) else repr(value)[:80]
        if self.unsupported:
            raise ParamError(
                self.name, f"`{self.name}` (={shown}) is not supported by power sampling{self.unsupported}"
            )
        raise ParamError(self.name, f"`{self.name}` (={shown}) must be {describe(schema)}")
