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
import re
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
    ConfigError naming it when it is none), ``accepts(source, answer)`` whether an answer is in
    the grammar's language, checked independently of the grammar library that masks the draws
    (None: no such check here). An engine that masks compiles each kind by name
    (:mod:`presto_sgl.engines.grammar`)."""

    name: str
    annotation: Any
    _: KW_ONLY
    schema: dict[str, Any]
    doc: str
    source: Callable[[Any], str]
    accepts: Callable[[str, str], bool | None]


def _text_kind(name: str, doc: str, accepts: Callable[[str, str], bool | None]) -> Grammar:
    """A grammar kind whose source is a non-empty string."""

    def source(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be a non-empty string")
        return value

    return Grammar(name, str, schema={"type": "string", "minLength": 1}, doc=doc, source=source, accepts=accepts)


def _json_of(schema: str, answer: str) -> bool | None:
    """``answer`` is JSON valid under ``schema`` (jsonschema's check; None without jsonschema)."""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError:
        return False
    return _valid(value, json.loads(schema))


def _valid(value: Any, schema: dict[str, Any]) -> bool | None:
    try:
        import jsonschema
    except ImportError:
        return None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def _tagged(source: str, answer: str) -> bool | None:
    """``answer`` is free text in which each trigger starts a tagged segment: a structure's
    ``begin``, JSON valid under its ``schema``, its ``end`` (a structural tag's ``structures`` and
    ``triggers``); None for the ``format`` form, which has no parser here."""
    tag = json.loads(source)
    if "structures" not in tag:
        return None
    at, segments, verdicts, decoder = 0, 0, [], json.JSONDecoder()
    while True:
        found = [(i, t) for t in tag["triggers"] if (i := answer.find(t, at)) >= 0]
        if not found:
            break
        start = min(found)[0]
        structure = next((s for s in tag["structures"] if answer.startswith(s["begin"], start)), None)
        if structure is None:
            return False
        body = start + len(structure["begin"])
        body += len(answer[body:]) - len(answer[body:].lstrip())
        try:
            value, after = decoder.raw_decode(answer, body)
        except json.JSONDecodeError:
            return False
        after += len(answer[after:]) - len(answer[after:].lstrip(" \t"))
        if not answer.startswith(structure["end"], after):
            return False
        verdicts.append(_valid(value, structure.get("schema") or {}))
        at, segments = after + len(structure["end"]), segments + 1
    if tag.get("at_least_one") and not segments:
        return False
    return False if False in verdicts else None if None in verdicts else True


GRAMMARS: dict[str, Grammar] = {
    g.name: g
    for g in (
        _text_kind(
            "regex",
            "the answer must fully match this regular expression",
            lambda source, answer: re.fullmatch(source, answer) is not None,
        ),
        Grammar(
            "json_schema",
            str | dict,
            schema={"anyOf": [{"type": "string", "minLength": 2}, {"type": "object"}]},
            doc="a JSON schema (an object, or its JSON text) the answer must be JSON of",
            source=lambda value: schema_text(value),
            accepts=_json_of,
        ),
        _text_kind(
            "ebnf",
            "an EBNF grammar (xgrammar's syntax, rule `root`) the answer must match",
            lambda source, answer: None,  # no EBNF parser here but the grammar library's own
        ),
        Grammar(
            "structural_tag",
            str | dict,
            schema={"anyOf": [{"type": "string", "minLength": 2}, {"type": "object"}]},
            doc="a structural tag (SGLang's tool-call constraint: free text, and after each trigger a tagged "
            "segment whose content is JSON of its schema), as an object with `structures` and `triggers` or "
            "with `format`, or its JSON text",
            source=lambda value: structural_tag_text(value),
            accepts=lambda source, answer: _tagged(source, answer),
        ),
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

    def validates(self, answer: str, tokens: int, ended: bool) -> bool | None:
        """Whether an answer (its text, its token count before the stop token, and whether it
        ended at one) is one this constraint allows, checked independently of the masking: a
        response cut at its length is a prefix, not an answer (False); None where its grammar
        has no independent check here (:attr:`Grammar.accepts`)."""
        if not ended or tokens < self.min_tokens:
            return False
        if self.grammar is None:
            return True
        kind, source = self.grammar
        return GRAMMARS[kind].accepts(source, answer)

    def describe(self) -> dict[str, object]:
        """The fields that are set (a run record's ``constraint``)."""
        out: dict[str, object] = {}
        if self.grammar is not None:
            out[self.grammar[0]] = self.grammar[1]
        if self.min_tokens:
            out["min_tokens"] = self.min_tokens
        return out


def structural_tag_text(tag: Any) -> str:
    """A structural tag (dict, or JSON text) as compact JSON text: SGLang's two forms, one with
    ``structures`` (each ``begin``, ``schema``, ``end``) and ``triggers``, one with ``format``."""
    if isinstance(tag, str):
        try:
            tag = json.loads(tag)
        except json.JSONDecodeError as e:
            raise ConfigError("structural_tag", tag, f"{{structural_tag}} is not valid JSON ({e})") from None
    legacy = isinstance(tag, dict) and isinstance(tag.get("structures"), list) and isinstance(tag.get("triggers"), list)
    if not (legacy or (isinstance(tag, dict) and isinstance(tag.get("format"), dict))):
        raise ConfigError(
            "structural_tag",
            tag,
            "{structural_tag} must be an object with `structures` (each with `begin`, `schema`, `end`) and "
            "`triggers`, or with `format` (xgrammar's structural tag)",
        )
    return json.dumps(tag, separators=(",", ":"))


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
