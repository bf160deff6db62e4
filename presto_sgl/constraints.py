"""Constraints C on a response: structured power sampling (docs/design.md §2.2).

The target under C is pi_C(x) ∝ p0(x | prompt)^alpha over the responses C allows: those
that complete C's language and end at a stop token within the horizon, or are a prefix
of some string of the language cut at the horizon. p0 stays the model's own (unmasked)
probability; only the proposal q_tau is masked by C and renormalized, resumed at the
grammar state after the kept prefix. Engines do the masking (:mod:`.engines.grammar`);
this module only says what C is.

A constraint is a grammar (a ``regex``, a ``json_schema`` or an ``ebnf`` grammar, as SGLang's
``/generate`` takes them, matched by xgrammar) and/or ``min_tokens``: no stop token before the
response has that many tokens (SGLang's ``min_new_tokens``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
GRAMMARS = ("regex", "json_schema", "ebnf")
"""The grammar kinds, by their SGLang sampling-parameter names."""


@dataclass(frozen=True)
class Constraint:
    """C: ``regex`` (full match), ``json_schema`` (JSON text) or ``ebnf`` (xgrammar's EBNF, rule
    ``root``), and/or ``min_tokens``."""

    regex: str | None = None
    json_schema: Any = None  # a dict or its JSON text; kept as compact JSON text
    min_tokens: int = 0
    ebnf: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in GRAMMARS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ConfigError(
                given[1],
                getattr(self, given[1]),
                f"give {{{given[0]}}} or {{{given[1]}}}, not both (one grammar per response)",
            )
        for name in ("regex", "ebnf"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be a non-empty string")
        if self.json_schema is not None:
            object.__setattr__(self, "json_schema", schema_text(self.json_schema))
        integer(0, "answer tokens before it may end")("min_tokens", self.min_tokens)

    @classmethod
    def of(
        cls,
        *,
        regex: str | None = None,
        json_schema: Any = None,
        dtype: Any = None,
        min_tokens: int | None = None,
        ebnf: str | None = None,
    ) -> Constraint | None:
        """The constraint of ``sgl.gen``-style arguments (``dtype`` as SGLang maps it to a regex),
        or None when they constrain nothing."""
        if dtype is not None:
            if dtype not in DTYPES:
                raise ConfigError("dtype", dtype, f"{{dtype}} (={dtype!r}) must be int, float, str or bool")
            if regex is not None:
                raise ConfigError("regex", regex, "give {regex} or {dtype}, not both")
            regex = DTYPES[dtype]
        c = cls(regex, json_schema, min_tokens or 0, ebnf)
        return c if c.grammar is not None or c.min_tokens else None

    @property
    def grammar(self) -> tuple[str, str] | None:
        """("regex" | "json_schema" | "ebnf", source) or None."""
        return next(((k, getattr(self, k)) for k in GRAMMARS if getattr(self, k) is not None), None)

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
