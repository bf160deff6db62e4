"""Every field an OpenAI request may send, declared once (:data:`OPENAI`
and :func:`power_fields`).

Each :class:`Field` declares its JSON Schema, the endpoints that take it and what the server
does with it. From that one declaration come: the check of each value (:meth:`Field.check`,
by the schema's own keywords: :mod:`.schema`), the OpenAPI document's request bodies
(:mod:`.openapi`) and the field table of docs/serve.md (:func:`field_table`, kept equal by
tests/unit/test_serve_doc.py); :mod:`.parse` turns a body into the chains it asks for. A
null field is the field left out: the server's default.

The power-sampling fields ride next to the OpenAI ones (with the ``openai`` client:
``extra_body={...}``) and are generated from the library's declared parameters
(:func:`presto_sgl.config.parameters`): ``method`` (the MH kernel),
``rule``, the schedule, ``budget``, ``cost_aware`` and every kernel's own, each with the
type, choices and bounds its declaration gives. The library checks them, so a request is
refused exactly where the library would refuse it.
"""

from __future__ import annotations

from typing import Any

from .. import registry
from ..config import PRESTO, SERVER_SIDE, parameters
from ..constraints import GRAMMARS
from ..fields import TEMPERATURE_RANGE, Param, params_of
from .request import BOTH, LENGTH, MAX_LOGPROBS, ROLES, Defaults, Field, Schema, ServerFacts
from .schema import NULL, integer


# -- the declarations -----------------------------------------------------------------------
def _fixed(schema: dict[str, Any]) -> Schema:
    return lambda served, kind: schema


def token_ids_schema(served: ServerFacts, min_items: int = 1) -> dict[str, Any]:
    bound = {"maximum": served.vocab - 1} if served.vocab is not None else {}
    return {"type": "array", "minItems": min_items, "items": {"type": "integer", "minimum": 0, **bound}}


def _prompt(served: ServerFacts, kind: str) -> dict[str, Any]:
    text, ids = {"type": "string", "minLength": 1}, token_ids_schema(served)
    return {
        "anyOf": [text, ids, {"type": "array", "minItems": 1, "items": {"anyOf": [text, ids]}}],
        "description": "a non-empty string, a list of token ids, or a non-empty list of either",
    }


def messages_schema(served: ServerFacts | None = None, kind: str = "chat") -> dict[str, Any]:
    """Chat ``messages``: turns of a role and text (a string or text parts)."""
    part = {
        "type": "object",
        "required": ["type", "text"],
        "additionalProperties": False,
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
    }
    message = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": list(ROLES)},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": part}]},
            "name": {"type": "string"},
        },
    }
    return {
        "type": "array",
        "minItems": 1,
        "items": message,
        "description": f"a non-empty list of {{role, content}} objects, role one of {list(ROLES)}",
    }


def _max_tokens(served: ServerFacts, kind: str) -> dict[str, Any]:
    return integer(0 if kind == "completions" else 1, default=served.defaults.config.target.max_new_tokens)


def _logprobs(served: ServerFacts, kind: str) -> dict[str, Any]:
    return integer(0, MAX_LOGPROBS) if kind == "completions" else {"type": "boolean"}


TEXT_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
IGNORED_DOC = "accepted and ignored (bookkeeping that does not shape an answer)"

OPENAI: tuple[Field, ...] = (
    Field(
        "model",
        lambda served, kind: {"type": "string", **({"enum": [served.model]} if served.model else {})},
        "must name the served model (404 `model_not_found` otherwise); may be left out",
        checked=False,
    ),
    Field(
        "prompt",
        _prompt,
        "a string (encoded by the model's tokenizer, no special tokens added), a list of token ids, "
        "or a list of either (one entry per prompt); required",
        ("completions",),
        nullable=False,
    ),
    Field(
        "messages",
        messages_schema,
        "`system` / `developer` / `user` / `assistant` turns, content a string or text parts; the model's "
        "chat template is applied straight to token ids (`apply_chat_template(..., tokenize=True)`), never "
        "through text; required",
        ("chat",),
        nullable=False,
    ),
    Field(
        "max_tokens",
        _max_tokens,
        "the answer's cap: the chain's response length T is the smallest multiple of the block size >= "
        "`max_tokens` (the block size: `min(block_size, max_tokens)` with the request's `block_size`, else "
        "`min(--block-size, max_tokens)`), and the answer is its first `max_tokens` tokens, then cut at EOS "
        "and at `stop`. Default `--max-new-tokens`. Power sampling targets the whole T-token response; each of "
        "the T/B stages costs K steps, so a long cap costs in proportion. Completions: 0 or 1 with `echo` and "
        "`logprobs` (the prompt scored), else >= 1",
    ),
    Field("max_completion_tokens", _fixed(integer(1)), "`max_tokens`' new name (sent, it wins)", ("chat",)),
    Field(
        "stop",
        _fixed(
            {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "items": {"type": "string", "minLength": 1}},
                ],
                "description": "a non-empty string or a list of them",
            }
        ),
        "a string or a list of any number of strings; the text ends before the first",
    ),
    Field(
        "n",
        lambda served, kind: integer(1, served.defaults.max_n, default=1),
        "chains per prompt; chain j of prompt i is keyed (seed, i*n + j): independent chains sharing the "
        "prompt's prefix in the backend's cache. Default 1, at most `--max-n`",
    ),
    Field(
        "best_of",
        _fixed(integer(1)),
        "only equal to `n` (power sampling returns each of its `n` chains); else 400",
        ("completions",),
    ),
    Field(
        "seed",
        _fixed(integer(0)),
        "the run seed: same seed, same request, same keys (on a seeded engine, the same answer). Default "
        "`--seed`, else a fresh one per request, returned in `presto.seed`",
    ),
    Field(
        "temperature",
        _fixed({"type": "number", "minimum": 0}),
        "the target's sequence-level temperature: t > 0 sets `alpha` = 1/t (0.25 is alpha 4; 1 is plain "
        f"sampling from p0; in [{TEMPERATURE_RANGE[0]:g}, {TEMPERATURE_RANGE[1]:g}]); 0, what harnesses send for "
        "greedy decoding, keeps the request's or server's `alpha` (the sharpest target configured); a request "
        "with both `temperature` > 0 and another `alpha` is a 400",
    ),
    Field(
        "logprobs",
        _logprobs,
        f"completions: an integer k in [0, {MAX_LOGPROBS}]: `logprobs` in OpenAI's legacy shape (`tokens`, "
        "`token_logprobs`, `top_logprobs`, `text_offset`) with each answer token's **log p0** (the base "
        "model's, not the proposal's); a sampled answer has no top alternatives (the chain's passes do not "
        "keep them): k > 0 is a 400 unless `echo` scores the prompt. Chat: `true` gives "
        "`choices[].logprobs.content`, each answer token's log p0 with `top_logprobs: []`",
    ),
    Field(
        "top_logprobs",
        _fixed(integer(0, MAX_LOGPROBS)),
        "with `logprobs: true`; a sampled answer has no alternatives: only 0",
        ("chat",),
    ),
    Field(
        "echo",
        _fixed({"type": "boolean", "default": False}),
        "with `logprobs`: **the prompt is scored, not sampled**: one forward pass of the backend gives log p0 "
        "of every prompt token (the first is null) and the k most likely tokens at each position "
        "(`top_logprobs`, at least the top one), plus, with `max_tokens` 1, the greedy next token (`max_tokens` "
        'must be 0 or 1; `n` 1). The response\'s `presto` says `{"scored": true, "power_sampling": false}`. '
        "This is lm-eval's loglikelihood request. Every engine scores: reference, embedded, SGLang (input "
        "log-probs of one prefill) and vLLM (raw `prompt_logprobs`). Without `logprobs`: the prompt's text "
        "before the sampled answer",
        ("completions",),
        nullable=False,
    ),
    Field(
        "stream",
        _fixed({"type": "boolean", "default": False}),
        "server-sent events: an SSE comment at once and every 15 s while the chains run (a proxy's idle "
        "timeout does not cut it), then one chunk per choice holding its whole text (an MH chain may rewrite "
        "any token until it ends, so nothing is final earlier), then `[DONE]`; an error after the stream "
        'began comes as a `data: {"error": ...}` event',
        nullable=False,
    ),
    Field(
        "stream_options",
        _fixed(
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"include_usage": {"type": "boolean"}, "continuous_usage_stats": {"type": "boolean"}},
                "description": '{"include_usage": true|false}',
            }
        ),
        '`{"include_usage": true}` adds the usage chunk (`choices: []`) before `[DONE]`; only with `stream`',
    ),
    Field(
        "return_token_ids",
        _fixed({"type": "boolean", "default": False}),
        "adds `token_ids` and `prompt_token_ids` to each choice and the chain's full `response_ids` to its `presto`",
        nullable=False,
    ),
    Field("user", _fixed({"type": "string"}), IGNORED_DOC),
    Field("metadata", _fixed(TEXT_MAP), IGNORED_DOC),
    Field("store", _fixed({"type": "boolean"}), IGNORED_DOC),
    Field("service_tier", _fixed({"type": "string"}), IGNORED_DOC),
    Field("parallel_tool_calls", _fixed({"type": "boolean"}), IGNORED_DOC),
    Field(
        "top_p",
        _fixed({"type": "number", "minimum": 1, "maximum": 1}),
        "only 1: the chain samples the full vocabulary; else 400",
        unsupported=" (the chain samples the full vocabulary); drop it",
    ),
    *(
        Field(
            name,
            _fixed({"type": "number", "minimum": 0, "maximum": 0}),
            "only 0: a penalty would change the target; else 400",
            unsupported=" (a penalty would change the target); drop it",
        )
        for name in ("presence_penalty", "frequency_penalty")
    ),
    Field(
        "logit_bias",
        _fixed({**TEXT_MAP, "additionalProperties": {"type": "number"}, "maxProperties": 0}),
        "only empty: a bias would change the target; else 400",
        unsupported="; drop it",
    ),
    Field(
        "suffix",
        _fixed(NULL),
        "not supported: 400 unless null",
        ("completions",),
        unsupported="; drop it",
        nullable=False,
    ),
    Field(
        "tools",
        _fixed({"type": "array", "maxItems": 0}),
        "only empty: not supported; else 400",
        ("chat",),
        unsupported="; drop it",
    ),
    Field(
        "tool_choice",
        _fixed({"enum": ["none"]}),
        "only `none`: not supported; else 400",
        ("chat",),
        unsupported="; drop it",
    ),
    Field(
        "response_format",
        _fixed(
            {
                "anyOf": [
                    {
                        "type": "object",
                        "required": ["type"],
                        "additionalProperties": False,
                        "properties": {"type": {"type": "string", "enum": ["text", "json_object"]}},
                    },
                    {
                        "type": "object",
                        "required": ["type", "json_schema"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "enum": ["json_schema"]},
                            "json_schema": {
                                "type": "object",
                                "required": ["schema"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "description": {"type": "string"},
                                    "schema": {"type": "object"},
                                    "strict": {"type": "boolean"},
                                },
                            },
                        },
                    },
                    {
                        "type": "object",
                        "required": ["type", "structures", "triggers"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "enum": ["structural_tag"]},
                            "structures": {"type": "array", "items": {"type": "object"}},
                            "triggers": {"type": "array", "items": {"type": "string"}},
                            "at_least_one": {"type": "boolean"},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["type", "format"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "enum": ["structural_tag"]},
                            "format": {"type": "object"},
                        },
                    },
                ],
                "description": '{"type": "text" | "json_object"}, {"type": "json_schema", "json_schema": '
                '{"name": ..., "schema": {...}}} or {"type": "structural_tag", ...} (SGLang\'s)',
            }
        ),
        "**structured power sampling**: `json_object` (a JSON object) or `json_schema` (its `schema`) "
        "restricts the target to the responses that are complete JSON of the schema ending at EOS (or "
        "valid prefixes cut at `max_tokens`): pi(x) ∝ p0(x)^alpha over them, sampled exactly (proposals "
        "from q masked by the grammar and resumed at each kept prefix; docs/design.md §2.2). `ending` "
        "is then `eos`. `structural_tag` (SGLang's: `structures` and `triggers`, or `format`) restricts "
        "it to text whose tagged segments are JSON of their schemas. `text`: no constraint",
    ),
    Field(
        "min_tokens",
        _fixed(integer(0)),
        "SGLang's and vLLM's field: no EOS before the response has this many tokens (the target is restricted "
        "to such responses; proposals mask EOS until then)",
    ),
)
"""The OpenAI fields, in docs/serve.md's order (then SGLang's grammar fields: :func:`grammar_fields`)."""


def grammar_fields() -> tuple[Field, ...]:
    """SGLang's grammar fields: one per kind of :data:`~presto_sgl.constraints.GRAMMARS`."""
    kinds = ", ".join(f"`{k}`" for k in GRAMMARS)
    return tuple(
        Field(
            g.name,
            _fixed(g.schema),
            f"SGLang's field: {g.doc} (structured power sampling, as `response_format`); one grammar per "
            f"request: {kinds} or `response_format` json",
        )
        for g in GRAMMARS.values()
    )


def _power_schema(param: Param) -> Schema:
    """The schema of a library parameter's request field: the type from its annotation, an
    ``enum`` from its choices, the bounds from its check, the default the server's own."""

    def schema(served: ServerFacts, kind: str) -> dict[str, Any]:
        if param.name == "method":
            out: dict[str, Any] = {"type": "string", "enum": list(registry.KERNELS)}  # baselines are not served
        else:
            choices = param.choice_list()
            kind_ = {"bool": "boolean", "int": "integer", "float": "number", "tuple": "array"}.get(param.kind, "string")
            out = {"type": kind_, "enum": list(choices)} if choices else {"type": kind_}
            out |= param.bounds()
            if kind_ == "array":
                out.setdefault("items", {"type": "number"})
        default = served_default(served.defaults, param.name)
        if default is not None:
            out["default"] = list(default) if isinstance(default, tuple) else default
        return out

    return schema


def served_default(defaults: Defaults, name: str) -> Any:
    """The server's value of a library parameter (``method``: the kernel), or None."""
    if name in PRESTO:
        return getattr(defaults.presto, name)
    return {**defaults.config.target.describe(), **defaults.config.kernel.describe()}.get(name)


def power_fields() -> tuple[Field, ...]:
    """The power-sampling fields: the library's declared parameters (every registered kernel's
    included), less the length (``max_tokens``), the server-side ones and the baselines'."""
    baseline = {p.name for spec in registry.BASELINES.values() for p in params_of(spec.params)}
    owners = registry.declared()
    out = []
    for p in parameters():
        if p.name in SERVER_SIDE | baseline | {LENGTH}:
            continue
        doc = "the MH kernel" if p.name == "method" else p.doc
        owner = owners.get(p.name)
        told = f"{owner}: {doc}" if owner and not doc.startswith(f"{owner}:") else doc
        out.append(Field(p.name, _power_schema(p), told, checked=False))
    return tuple(out)


def request_fields(kind: str) -> tuple[Field, ...]:
    """Every field a request of ``kind`` ("completions" or "chat") may send."""
    return tuple(f for f in (*OPENAI, *grammar_fields(), *power_fields()) if kind in f.kinds)


def fields(kind: str) -> frozenset[str]:
    """The names of :func:`request_fields`."""
    return frozenset(f.name for f in request_fields(kind))


def field_table() -> str:
    """docs/serve.md's table of request fields, from the declarations (consecutive fields with
    the same endpoints and doc share a row)."""
    rows: list[tuple[list[str], str, str]] = []
    for f in (*OPENAI, *grammar_fields(), *power_fields()):
        where = "both" if f.kinds == BOTH else ", ".join(f.kinds)
        doc = f.doc.replace("|", "\\|")
        if rows and rows[-1][1:] == (where, doc):
            rows[-1][0].append(f.name)
        else:
            rows.append(([f.name], where, doc))
    lines = ["| field | endpoints | here |", "|---|---|---|"]
    lines += [f"| {', '.join(f'`{n}`' for n in names)} | {where} | {doc} |" for names, where, doc in rows]
    lines.append("| anything else | | 400 naming it (a misspelt `blocksize` is an error, not a silent default) |")
    return "\n".join(lines)
