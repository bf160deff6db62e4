"""The OpenAI response shapes: completions, chat completions, their one-chunk streams, errors.

Each choice carries the chain's metrics in an extra ``presto`` field (``PromptMetrics``,
log p0 of the whole response, ``eos_index``, and the chain's full T token ids with
``return_token_ids``); the response's ``presto`` field holds the seed and the sampler's
configuration, which redraw it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from .params import ChainJob
from .service import Choice

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 408: "timeout", 429: "rate_limit_exceeded",
               499: "client_closed_request", 500: "internal_error", 502: "backend_error", 503: "backend_unavailable",
               504: "timeout"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {message, type, param, code}}`` as the OpenAI API shapes it."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"), "param": param, "code": code}}


def _chain(job: ChainJob, c: Choice) -> dict[str, Any]:
    state = c.result.state
    loglik = state.log_likelihood()
    out: dict[str, Any] = {
        "metrics": asdict(c.result.metrics),
        "log_p0": loglik,
        "log_p0_per_token": loglik / state.length if state.length else 0.0,
        "eos_index": c.eos_index,
    }
    if job.return_token_ids:
        out["response_ids"] = list(state.tokens)
    return out


def _usage(prompts: Sequence[Sequence[int]], choices: Sequence[Choice]) -> dict[str, int]:
    prompt = sum(len(p) for p in prompts)
    completion = sum(len(c.token_ids) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _head(kind: str, model: str) -> dict[str, Any]:
    prefix, obj = ("chatcmpl", "chat.completion") if kind == "chat" else ("cmpl", "text_completion")
    return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()), "model": model}


def _choice(job: ChainJob, c: Choice, prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    body: dict[str, Any] = {"index": c.index, "finish_reason": c.finish_reason, "logprobs": None}
    if job.kind == "chat":
        body["message"] = {"role": "assistant", "content": c.text}
    else:
        body["text"] = c.text
    if job.return_token_ids:
        body["token_ids"] = list(c.token_ids)
        body["prompt_token_ids"] = list(prompts[c.index // job.n])
    body["presto"] = _chain(job, c)
    return body


def response(job: ChainJob, model: str, seed: int, prompts: Sequence[Sequence[int]], choices: Sequence[Choice],
             config: dict[str, Any]) -> dict[str, Any]:
    """The whole (non-streamed) response."""
    return {
        **_head(job.kind, model),
        "choices": [_choice(job, c, prompts) for c in choices],
        "usage": _usage(prompts, choices),
        "presto": {"seed": seed, "config": config},
    }


def stream_events(body: dict[str, Any]) -> Iterator[str]:
    """``body`` as server-sent events: one chunk per choice with its whole text, then the
    usage chunk and ``[DONE]``. Power sampling finishes a response before any of it is
    final (a later MH step may rewrite any token), so nothing streams earlier."""
    chat = body["object"] == "chat.completion"
    head = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk" if chat else "text_completion"}
    for c in body["choices"]:
        piece = dict(c)
        if chat:
            piece["delta"] = piece.pop("message")
        yield f"data: {json.dumps({**head, 'choices': [piece]})}\n\n"
    yield f"data: {json.dumps({**head, 'choices': [], 'usage': body['usage'], 'presto': body['presto']})}\n\n"
    yield "data: [DONE]\n\n"
