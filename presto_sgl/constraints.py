"""Constraints C on a response: structured power sampling (docs/design.md §2.2).

The target under C is pi_C(x) ∝ p0(x | prompt)^alpha over the responses C allows: those
that complete C's language and end at a stop token within the horizon, or are a prefix
of some string of the language cut at the horizon. p0 stays the model's own (unmasked)
probability; only the proposal q_tau is masked by C and renormalized, resumed at the
grammar state after the kept prefix. Engines do the masking (:mod:`.engines.grammar`);
this module only says what C is.

A constraint is a grammar (a ``regex``, a ``json_schema`` or an ``ebnf`` grammar, as SGLang's
``/generate`` takes them, matched by xgrammar) and/or ``min_tokens``: no stop token before the
response has that many tokens (SGLang's ``min_new_tokens``). The grammar kinds are declared once,
in :data:`GRAMMARS`: the request fields of ``serve`` and the arguments of ``power_gen`` are theirs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from .errors import ConfigError
from .fields import integer

REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""
DTYPES: dict[Any, str] = {
    int: REGEX_INT,
    "int": REGEX_INT,
    float: REGEX_FLOAT,
    "float": REGEX_FLOAT,
    str: REGEX_STR,
    "str": REGEX_STR,
    bool: REGEX_BOOL,
    "bool": REGEX_BOOL,
}
"""``sgl.gen(dtype=...)`` as SGLang maps it (``sglang.lang.ir``, ``RuntimeEndpoint``): a regex."""


@dataclass(frozen=True)
class Grammar:
    """A grammar kind. ``name`` is SGLang's sampling parameter, ``serve``'s request field and
    ``power_gen``'s argument alike; ``annotation`` what a caller passes, ``schema`` and ``doc``
    its request field's JSON Schema and help, ``source`` the value as the grammar's text (a
    ConfigError naming it when it is none). An engine that masks compiles each kind by name
    (:mod:`presto_sgl.engines.grammar`)."""

    name: str
    annotation: Any
    _: KW_ONLY
    schema: dict[str, Any]
    doc: str
    source: Callable[[Any], str]


def _text_kind(name: str, doc: str) -> Grammar:
    """A grammar kind whose source is a non-empty string."""

    def source(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be a non-empty string")
        return value

    return Grammar(name, str, schema={"type": "string", "minLength": 1}, doc=doc, source=source)


GRAMMARS: dict[str, Grammar] = {
    g.name: g
    for g in (
        _text_kind("regex", "the answer must fully match this regular expression"),
        Grammar(
            "json_schema",
            str | dict,
            schema={"anyOf": [{"type": "string", "minLength": 2}, {"type": "object"}]},
            doc="a JSON schema (an object, or its JSON text) the answer must be JSON of",
            source=lambda value: schema_text(value),
        ),
        _text_kind("ebnf", "an EBNF grammar (xgrammar's syntax, rule `root`) the answer must match"),
    )
}
"""The grammar kinds a constraint takes, one per response."""


@dataclass(frozen=True, init=False)
class Constraint:
    """C: a ``grammar`` (its kind and source text: a ``regex`` (full match), a ``json_schema``
    (compact JSON text) or an ``ebnf`` grammar (xgrammar's EBNF, rule ``root``); see
    :data:`GRAMMARS`), and/or ``min_tokens``. Built by keyword: ``Constraint(regex="[0-9]+")``."""

    grammar: tuple[str, str] | None  # ("regex" | "json_schema" | "ebnf", source) or None
    min_tokens: int

    def __init__(self, *, min_tokens: int = 0, **grammar: Any) -> None:
        unknown = sorted(set(grammar) - set(GRAMMARS))
        if unknown:
            raise TypeError(f"Constraint got {unknown[0]!r}; the grammar kinds are {list(GRAMMARS)}")
        given = [k for k in GRAMMARS if grammar.get(k) is not None]
        if len(given) > 1:
            raise ConfigError(
                given[1],
                grammar[given[1]],
                f"give {{{given[0]}}} or {{{given[1]}}}, not both (one grammar per response)",
            )
        kind = given[0] if given else None
        object.__setattr__(self, "grammar", (kind, GRAMMARS[kind].source(grammar[kind])) if kind else None)
        object.__setattr__(self, "min_tokens", integer(0, "answer tokens before it may end")("min_tokens", min_tokens))

    @classmethod
    def of(cls, *, dtype: Any = None, min_tokens: int | None = None, **grammar: Any) -> Constraint | None:
        """The constraint of ``sgl.gen``-style arguments (``dtype`` as SGLang maps it to a regex;
        a grammar kind of :data:`GRAMMARS` by its name), or None when they constrain nothing."""
        if dtype is not None:
            if dtype not in DTYPES:
                raise ConfigError("dtype", dtype, f"{{dtype}} (={dtype!r}) must be int, float, str or bool")
            if grammar.get("regex") is not None:
                raise ConfigError("regex", grammar["regex"], "give {regex} or {dtype}, not both")
            grammar["regex"] = DTYPES[dtype]
        c = cls(min_tokens=min_tokens or 0, **grammar)
        return c if c.grammar is not None or c.min_tokens else None

    def describe(self) -> dict[str, object]:
        """The fields that are set (a run record's ``constraint``)."""
        out: dict[str, object] = {}
        if self.grammar is not None:
            out[self.grammar[0]] = self.grammar[1]
        if self.min_tokens:
            out["min_tokens"] = self.min_tokens
        return out


def schema_text(schema: Any) -> str:
    """A JSON schema (dict, or JSON text) as compact JSON text; ConfigError when it is neither."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ConfigError("json_schema", schema, f"{{json_schema}} is not valid JSON ({e})") from None
    if not isinstance(schema, dict):
        raise ConfigError(
            "json_schema", schema, f"{{json_schema}} must be a JSON object (a dict or its JSON text), got {schema!r}"
        )
    return json.dumps(schema, separators=(",", ":"))  # key order kept: xgrammar emits properties in it
