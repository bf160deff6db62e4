"""The endpoint's OpenAPI 3.1 document (``GET /openapi.json``), built from what the server accepts.

The request bodies are the request model's declarations (:mod:`.fieldtable`): each field's
schema and doc as :func:`~.fieldtable.request_fields` declares them for the endpoint, with
``additionalProperties: false`` as the server refuses any other, once per registered kernel
(``anyOf``: ``method`` names it, and only its own parameters ride along). Token ids are
bounded by the engine's vocabulary, ``model`` is the served one, defaults are the server's.

``limits`` tightens the document for fuzzing (tests/integration/test_serve_fuzz.py):
``{field: {keyword: value}}`` adds JSON Schema keywords (``maximum``, ``maxItems``,
``maxLength``, ``maxProperties``, ``minLength``, ``pattern``) to every subschema of that field
of a type that takes the keyword, so generated requests stay small and fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import registry
from ..fields import params_of
from ..version import __version__
from .fieldtable import messages_schema, request_fields, token_ids_schema
from .request import ServerFacts
from .schema import nullable
from .service import Service

JSON = "application/json"
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


def request_schema(service: Service, kind: str) -> dict[str, Any]:
    """The request body of ``kind`` ("completions" or "chat"), each field's schema from its
    declaration (:func:`~.fieldtable.request_fields`): one variant per registered kernel
    (``method``), each with the kernel's own parameters and no other kernel's."""
    served = ServerFacts(service.defaults, service.model, service.engine.capabilities.vocab_size)
    properties = {f.name: f.document(served, kind) for f in request_fields(kind)}
    required = ["messages" if kind == "chat" else "prompt"]
    return {"type": "object", "anyOf": _kernel_variants(properties, required, service.defaults.config.kernel.name)}


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
        else:
            props["method"], needs = named, needs + ["method"]
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
    served = ServerFacts(service.defaults, service.model, service.engine.capabilities.vocab_size)
    chat_messages = messages_schema(served)
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
        "properties": {"tokens": token_ids_schema(served, min_items=0)},
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
