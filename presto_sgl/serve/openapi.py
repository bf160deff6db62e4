"""The endpoint's OpenAPI 3.1 document (``GET /openapi.json``), built from what the server accepts.

The request bodies list exactly the fields :mod:`.params` accepts for each kind
(:func:`~.params.fields`), with ``additionalProperties: false`` as the server refuses any
other, once per registered kernel (``anyOf``: ``method`` names it, and only its own
parameters ride along). The power-sampling fields are generated from the registry's declared
parameters (:func:`presto_sgl.config.parameters`): the type from the annotation, an ``enum``
from the choices, the bounds from the check (:func:`~presto_sgl.fields.integer`,
:func:`~presto_sgl.fields.number`, ...), the default from the server's own defaults, the
description from the parameter's help; a kernel registered later appears the same way. A
null field is the server's default (but ``stream``, ``echo``, ``return_token_ids``: true or
false). Token ids are bounded by the engine's vocabulary and ``n`` by ``--max-n``. What the
server checks across fields (``keying`` against ``rule``, ``temperature`` against ``alpha``,
``best_of`` equal to ``n``, ``stream_options`` only with ``stream``, ...) is said in the
descriptions only.

``limits`` tightens the document for fuzzing (tests/integration/test_serve_fuzz.py):
``{field: {keyword: value}}`` adds JSON Schema keywords (``maximum``, ``maxItems``,
``maxLength``, ``maxProperties``, ``minLength``, ``pattern``) to every subschema of that field
of a type that takes the keyword, so generated requests stay small and fast.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .. import __version__, registry
from ..config import config_options, parameters
from ..fields import params_of
from .params import IGNORED, MAX_LOGPROBS, fields, power_fields
from .service import ROLES, Service

JSON = "application/json"
NULL = {"type": "null"}
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
"""OpenAI's error body: ``{"error": {message, type, param, code}}``."""

LIMIT_KEYWORDS = {
    "maximum": ("integer", "number"),
    "maxItems": ("array",),
    "maxLength": ("string",),
    "maxProperties": ("object",),
    "minLength": ("string",),
    "pattern": ("string",),
}
"""The JSON Schema keywords ``limits`` may add, and the types that take each."""


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null."""
    if isinstance(schema.get("type"), str) and "enum" not in schema:
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, NULL]}


def _check_bounds(check: Any) -> dict[str, Any]:
    """The JSON Schema bounds of a declared parameter's check (:mod:`presto_sgl.fields`'
    factories: ``integer(low)``, ``number(low, strict=...)``, ``temperatures``,
    ``nonempty_text``), read from the check's closure; {} for any other check."""
    if check is None or not callable(check):
        return {}
    factory = getattr(check, "__qualname__", "").split(".")[0]
    try:
        free = inspect.getclosurevars(check).nonlocals
    except TypeError:
        return {}
    if factory == "integer" and "low" in free:
        return {"minimum": free["low"]}
    if factory == "number" and "low" in free:
        return {"exclusiveMinimum" if free.get("strict") else "minimum": free["low"]}
    if factory == "temperatures":
        return {"minItems": 1, "uniqueItems": True, "items": {"type": "number", "exclusiveMinimum": 0}}
    if factory == "nonempty_text":
        return {"minLength": 1}
    return {}


def power_schemas(defaults: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The schema of each power-sampling request field (:func:`~.params.power_fields`), from
    its declared parameter; ``defaults``: the server's value of each (flat options)."""
    declared = {p.name: p for p in parameters()}
    kernels = list(registry.KERNELS)  # `method` names a kernel here: the baselines are not served
    out: dict[str, dict[str, Any]] = {}
    for name in power_fields():
        p = declared.get("method" if name == "sampler" else name)
        if p is None:
            out[name] = {}
            continue
        if p.name == "method":
            schema: dict[str, Any] = {"type": "string", "enum": kernels}
        else:
            choices = p.choice_list()
            kind = {"bool": "boolean", "int": "integer", "float": "number", "tuple": "array"}.get(p.kind, "string")
            schema = {"type": kind, "enum": list(choices)} if choices else {"type": kind}
            schema |= _check_bounds(p.check)
            if kind == "array":
                schema.setdefault("items", {"type": "number"})
        schema["description"] = {"method": "the MH kernel", "sampler": "the old name of `method`"}.get(name, p.doc)
        if name == "sampler":
            schema["deprecated"] = True
        default = defaults.get("kernel" if p.name == "method" else p.name)
        if default is not None and name != "sampler":
            schema["default"] = list(default) if isinstance(default, tuple) else default
        out[name] = nullable(schema)
    return out


def _common(service: Service) -> dict[str, dict[str, Any]]:
    """The OpenAI fields both kinds accept."""
    defaults = service.defaults
    integer = lambda low, **more: nullable({"type": "integer", "minimum": low, **more})  # noqa: E731
    text_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "model": nullable(
            {"type": "string", "enum": [service.model], "description": "the served model (GET /v1/models)"}
        ),
        "max_tokens": integer(
            1,
            default=defaults.config.max_new_tokens,
            description="the answer's cap (the chain runs to the next whole block)",
        ),
        "n": integer(1, maximum=defaults.max_n, default=1, description="chains per prompt"),
        "seed": integer(0, description="the run seed (default: the server's, else a fresh one, returned)"),
        "stop": {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}},
                NULL,
            ],
            "description": "the text ends before the first of these strings",
        },
        "stream": {"type": "boolean", "default": False},
        "stream_options": nullable(
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"include_usage": {"type": "boolean"}, "continuous_usage_stats": {"type": "boolean"}},
                "description": "only with `stream: true`",
            }
        ),
        "return_token_ids": {"type": "boolean", "default": False},
        "logit_bias": nullable(
            {
                **text_map,
                "additionalProperties": {"type": "number"},
                "maxProperties": 0,
                "description": "not supported: only empty",
            }
        ),
        "temperature": nullable(
            {
                "type": "number",
                "minimum": 0,
                "description": "t > 0 sets alpha = 1/t (not with another `alpha`); 0 keeps alpha",
            }
        ),
        "top_p": nullable({"type": "number", "minimum": 1, "maximum": 1, "description": "only 1"}),
        "presence_penalty": nullable({"type": "number", "minimum": 0, "maximum": 0, "description": "only 0"}),
        "frequency_penalty": nullable({"type": "number", "minimum": 0, "maximum": 0, "description": "only 0"}),
        "user": nullable({"type": "string"}),
        "metadata": nullable(text_map),
        "store": nullable({"type": "boolean"}),
        "service_tier": nullable({"type": "string"}),
        "parallel_tool_calls": nullable({"type": "boolean"}),
    }


def _token_ids(service: Service, *, min_items: int = 1) -> dict[str, Any]:
    vocab = service.engine.capabilities.vocab_size
    return {"type": "array", "minItems": min_items, "items": {"type": "integer", "minimum": 0, "maximum": vocab - 1}}


def messages_schema() -> dict[str, Any]:
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
    return {"type": "array", "minItems": 1, "items": message}


def request_schema(service: Service, kind: str) -> dict[str, Any]:
    """The request body of ``kind`` ("completions" or "chat"): one variant per registered
    kernel (``method``), each with the kernel's own parameters and no other kernel's."""
    ids, text = _token_ids(service), {"type": "string", "minLength": 1}
    known = _common(service) | power_schemas(config_options(service.defaults.config, service.defaults.presto))
    if kind == "chat":
        known |= {
            "messages": messages_schema(),
            "max_completion_tokens": nullable({"type": "integer", "minimum": 1, "description": "max_tokens' new name"}),
            "logprobs": nullable({"type": "boolean", "description": "each answer token's log p0"}),
            "top_logprobs": nullable(
                {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_LOGPROBS,
                    "description": "with `logprobs: true`; a sampled answer has no alternatives: 0",
                }
            ),
            "tools": nullable({"type": "array", "maxItems": 0, "description": "not supported: only empty"}),
            "tool_choice": {"enum": ["none", None]},
            "response_format": nullable(
                {
                    "type": "object",
                    "required": ["type"],
                    "additionalProperties": False,
                    "properties": {"type": {"type": "string", "enum": ["text"]}},
                }
            ),
        }
        required = ["messages"]
    else:
        known |= {
            "prompt": {
                "anyOf": [text, ids, {"type": "array", "minItems": 1, "items": {"anyOf": [text, ids]}}],
                "description": "a string, a list of token ids, or a list of either (one entry per prompt)",
            },
            "max_tokens": nullable(
                {
                    "type": "integer",
                    "minimum": 0,
                    "default": service.defaults.config.max_new_tokens,
                    "description": "the answer's cap (the chain runs to the next whole block); 0 or 1 "
                    "with `echo` and `logprobs` (the prompt scored)",
                }
            ),
            "logprobs": nullable(
                {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_LOGPROBS,
                    "description": "log p0 of each answer token; k > 0 alternatives only with `echo`",
                }
            ),
            "echo": {
                "type": "boolean",
                "default": False,
                "description": "the prompt before the answer; with `logprobs`: the prompt scored",
            },
            "best_of": nullable({"type": "integer", "minimum": 1, "description": "only equal to `n`"}),
            "suffix": {**NULL, "description": "not supported"},
        }
        required = ["prompt"]
    accepted = fields(kind)
    properties = {name: known.get(name, {}) for name in sorted(accepted)}  # {}: a field added without a schema here
    for name in IGNORED & accepted:
        properties[name] = {**properties[name], "description": properties[name].get("description", "ignored")}
    return {"type": "object", "anyOf": _kernel_variants(properties, required, service.defaults.config.kernel)}


def _kernel_variants(properties: dict[str, Any], required: list[str], default: str) -> list[dict[str, Any]]:
    """The body once per registered kernel: ``method`` names it (the server's ``default`` kernel:
    or is left out), and only its own parameters ride along (another kernel's is a 400)."""
    own = {name: {p.name for p in params_of(spec.params)} for name, spec in registry.KERNELS.items()}
    everyone = set().union(*own.values())
    variants = []
    for kernel, mine in own.items():
        props = {k: v for k, v in properties.items() if k not in everyone - mine}
        named = {"type": "string", "enum": [kernel], "description": "the MH kernel"}
        needs = list(required)
        if kernel == default:
            props["method"] = nullable({**named, "default": kernel})
            props["sampler"] = nullable({**named, "description": "the old name of `method`", "deprecated": True})
        else:
            props["method"], needs = named, needs + ["method"]
            props["sampler"] = NULL
        variants.append({"type": "object", "required": needs, "properties": props, "additionalProperties": False})
    return variants


def _answer(description: str, media: tuple[str, ...] = (JSON,)) -> dict[str, Any]:
    """A 200 answer: a JSON object, or server-sent events (no schema: OpenAPI 3.1 has none per event)."""
    return {
        "description": description,
        "content": {m: {"schema": {"type": "object"}} if m == JSON else {} for m in media},
    }


def _errors(*statuses: str) -> dict[str, Any]:
    return {
        s: {"description": "an error", "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for s in statuses
    }


def _operation(
    summary: str,
    ok: dict[str, Any],
    body: dict[str, Any] | None = None,
    errors: tuple[str, ...] = ("4XX",),
    operation_id: str = "",
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "operationId": operation_id, "responses": {"200": ok, **_errors(*errors)}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
    return op


def openapi_schema(service: Service, limits: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the app serving ``service`` (see the module docstring for ``limits``)."""
    sampling_errors = ("400", "404", "429", "4XX", "5XX")
    chat_messages = messages_schema()
    tokenize = {
        "type": "object",
        "additionalProperties": False,
        "anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
        "properties": {
            "prompt": {"type": "string"},
            "messages": chat_messages,
            "add_special_tokens": {"type": "boolean", "default": True},
        },
    }
    detokenize = {
        "type": "object",
        "required": ["tokens"],
        "additionalProperties": False,
        "properties": {"tokens": _token_ids(service, min_items=0)},
    }
    completions, chat = request_schema(service, "completions"), request_schema(service, "chat")
    if limits:
        completions, chat = limited(completions, limits), limited(chat, limits)
        tokenize, detokenize = limited(tokenize, limits), limited(detokenize, limits)
    streamed = (JSON, "text/event-stream")
    paths = {
        "/v1/completions": {
            "post": _operation(
                "power-sampled completions",
                _answer("a text_completion (stream: server-sent events)", streamed),
                completions,
                sampling_errors,
                "createCompletion",
            )
        },
        "/v1/chat/completions": {
            "post": _operation(
                "power-sampled chat completions",
                _answer("a chat.completion (stream: server-sent events)", streamed),
                chat,
                sampling_errors,
                "createChatCompletion",
            )
        },
        "/v1/models": {
            "get": _operation("the served model", _answer("a list of one model"), operation_id="listModels")
        },
        "/health": {
            "get": {
                "summary": "the backend's health and the pool's counts",
                "operationId": "health",
                "responses": {"200": _answer("healthy"), "503": _answer("the backend is unavailable")},
            }
        },
        "/tokenize": {
            "post": _operation(
                "a prompt's token ids", _answer("{tokens, count, max_model_len}"), tokenize, operation_id="tokenize"
            )
        },
        "/detokenize": {
            "post": _operation("token ids' text", _answer("{prompt}"), detokenize, operation_id="detokenize")
        },
        "/tokenizer_info": {
            "get": _operation("the tokenizer's description", _answer("the tokenizer"), operation_id="tokenizerInfo")
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "operationId": "metrics",
                "responses": {
                    "200": {"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}}
                },
            }
        },
        "/version": {"get": _operation("the server's version", _answer("{version}"), operation_id="version")},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "presto-sgl serve",
            "version": __version__,
            "description": f"Exact power sampling behind an OpenAI-compatible endpoint, serving `{service.model}`. "
            "The power-sampling fields ride next to the OpenAI ones (docs/serve.md).",
        },
        "paths": paths,
        "components": {"schemas": {"Error": ERROR}},
    }


def limited(schema: Any, limits: Mapping[str, Mapping[str, Any]]) -> Any:
    """``schema`` with ``limits[field]``'s size keywords added under each listed property
    (wherever a subschema's type takes the keyword)."""
    if isinstance(schema, list):
        return [limited(s, limits) for s in schema]
    if not isinstance(schema, dict):
        return schema
    properties = schema.get("properties")
    out = {k: limited(v, limits) for k, v in schema.items() if not (k == "properties" and isinstance(v, dict))}
    if isinstance(properties, dict):
        out["properties"] = {
            name: _bound(sub, limits[name]) if name in limits else limited(sub, limits)
            for name, sub in properties.items()
        }
    return out


def _bound(schema: Any, keywords: Mapping[str, Any]) -> Any:
    """Every subschema of ``schema`` with ``keywords`` its type takes."""
    if isinstance(schema, list):
        return [_bound(s, keywords) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bound(v, keywords) for k, v in schema.items()}
    types = schema.get("type")
    types = (types,) if isinstance(types, str) else tuple(types or ())
    for keyword, value in keywords.items():
        if any(t in types for t in LIMIT_KEYWORDS.get(keyword, ())):
            tighters: dict[str, Callable[[Any, Any], Any]] = {"minLength": max, "pattern": lambda old, new: new}
            tighter = tighters.get(keyword, min)
            out[keyword] = tighter(out[keyword], value) if keyword in out else value
    return out
