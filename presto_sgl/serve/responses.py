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

from ..engines.text import TextView
from .parse import ChainJob
from .service import Choice

ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    408: "timeout",
    429: "rate_limit_exceeded",
    499: "client_closed_request",
    500: "internal_error",
    502: "backend_error",
    503: "backend_unavailable",
    504: "timeout",
}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {message, type, param, code}}`` as the OpenAI API shapes it."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"), "param": param, "code": code}}


def _chain(job: ChainJob, c: Choice) -> dict[str, Any]:
    if c.result is None:
        return {"scored": True, "power_sampling": False}
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


def _tops(view: TextView, c: Choice, start: int, k: int) -> list[dict[str, float] | None]:
    """Per token of ``c`` from ``start``: its top-k alternatives by text (scored), or itself."""
    out: list[dict[str, float] | None] = []
    for i, (t, lp) in enumerate(zip(c.token_ids, c.logp, strict=True)):
        if lp is None:
            out.append(None)
            continue
        alts = c.scored.top[start + i][:k] if c.scored is not None else ()
        out.append({view.decode([j]): v for j, v in alts} | {view.decode([t]): lp})
    return out


def completion_logprobs(view: TextView, c: Choice, k: int, offset: int = 0) -> dict[str, Any]:
    """OpenAI's legacy ``logprobs`` object: ``tokens``, ``token_logprobs`` (log p0; null for a
    prompt's first token), ``top_logprobs`` and ``text_offset`` (characters, from ``offset``)."""
    tokens = [view.decode([t]) for t in c.token_ids]
    offsets, at = [], offset
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    return {
        "tokens": tokens,
        "token_logprobs": list(c.logp),
        "top_logprobs": _tops(view, c, 0, k),
        "text_offset": offsets,
    }


def chat_logprobs(view: TextView, c: Choice) -> dict[str, Any]:
    """Chat's ``logprobs``: ``content``, one {token, logprob, bytes, top_logprobs: []} per answer token."""

    def entry(t: int, lp: float | None) -> dict[str, Any]:
        s = view.decode([t])
        return {"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": []}

    return {"content": [entry(t, lp) for t, lp in zip(c.token_ids, c.logp, strict=True)]}


def _usage(prompts: Sequence[Sequence[int]], completion: int) -> dict[str, int]:
    prompt = sum(len(p) for p in prompts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _head(kind: str, model: str) -> dict[str, Any]:
    prefix, obj = ("chatcmpl", "chat.completion") if kind == "chat" else ("cmpl", "text_completion")
    return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()), "model": model}


def _choice(job: ChainJob, view: TextView, c: Choice, prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    prompt = prompts[c.index // job.n]
    body: dict[str, Any] = {"index": c.index, "finish_reason": c.finish_reason, "logprobs": None}
    if job.kind == "chat":
        body["message"] = {"role": "assistant", "content": c.text}
        if job.logprobs is not None:
            body["logprobs"] = chat_logprobs(view, c)
    elif c.scored is not None:  # the prompt (and its greedy next token) scored
        body["text"] = c.text
        body["logprobs"] = completion_logprobs(view, c, job.logprobs or 0)
    else:
        head = view.decode(prompt) if job.echo else ""
        body["text"] = head + c.text
        if job.logprobs is not None:
            body["logprobs"] = completion_logprobs(view, c, 0, len(head))
    if job.return_token_ids:
        body["token_ids"] = list(c.token_ids)
        body["prompt_token_ids"] = list(prompt)
    body["presto"] = _chain(job, c)
    return body


def response(
    job: ChainJob,
    view: TextView,
    model: str,
    seed: int,
    prompts: Sequence[Sequence[int]],
    choices: Sequence[Choice],
    config: dict[str, Any],
) -> dict[str, Any]:
    """The whole (non-streamed) response."""
    presto = (
        {"seed": seed, "config": config}
        if not job.scoring
        else {
            "scored": True,
            "power_sampling": False,
            "note": "echo with logprobs: the prompt scored under p0 in one pass, no power sampling",
        }
    )
    return {
        **_head(job.kind, model),
        "choices": [_choice(job, view, c, prompts) for c in choices],
        "usage": _usage(
            prompts, job.max_tokens * len(choices) if job.scoring else sum(len(c.token_ids) for c in choices)
        ),
        "presto": presto,
    }


def stream_events(body: dict[str, Any], include_usage: bool) -> Iterator[str]:
    """``body`` as server-sent events: one chunk per choice with its whole text, then (with
    ``include_usage``) the usage chunk, and ``[DONE]``; the response's ``presto`` rides on the
    last chunk. Power sampling finishes a response before any of it is final (a later MH step
    may rewrite any token), so nothing streams earlier."""
    chat = body["object"] == "chat.completion"
    head = {k: body[k] for k in ("id", "created", "model")} | {
        "object": "chat.completion.chunk" if chat else "text_completion"
    }
    chunks = []
    for c in body["choices"]:
        piece = dict(c)
        if chat:
            piece["delta"] = piece.pop("message")
        chunks.append({**head, "choices": [piece]})
    if include_usage:
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    chunks[-1]["presto"] = body["presto"]
    for chunk in chunks:
        yield f"data: {json.dumps(chunk, allow_nan=False)}\n\n"
    yield "data: [DONE]\n\n"
