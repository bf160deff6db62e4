"""The tokenizer endpoints in vLLM's shapes (what lm-eval's ``tokenizer_backend=remote``
uses): ``/tokenize``, ``/detokenize``, ``/tokenizer_info``. Each takes the request body and
returns the answer's, or raises a :class:`~.request.ParamError` naming the field (400)."""

from __future__ import annotations

from typing import Any

from .request import ParamError
from .schema import token_ids
from .service import Service


def tokenize(service: Service, body: Any) -> dict[str, Any]:
    """``prompt`` (text; ``add_special_tokens``, default true) or ``messages`` (the chat template,
    with the generation prompt) -> ``tokens``, ``count``, ``max_model_len``."""
    if not isinstance(body, dict):
        raise ParamError(None, "the request body must be a JSON object")
    special = body.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise ParamError("add_special_tokens", f"`add_special_tokens` (={str(special)[:80]}) must be true or false")
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise ParamError("messages", "`messages` must be a non-empty list of {role, content} objects")
        ids = service.chat_ids(messages)
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ParamError("prompt", f"`prompt` (={str(prompt)[:80]}) must be a string (or send `messages`)")
        ids = service.encode(prompt, special)
    return {"tokens": ids, "count": len(ids), "max_model_len": service.engine.capabilities.context_length}


def detokenize(service: Service, body: Any) -> dict[str, Any]:
    """``tokens`` -> ``prompt``."""
    raw = body.get("tokens") if isinstance(body, dict) else None
    tokens = [] if raw == [] else token_ids(raw)
    vocab = service.engine.capabilities.vocab_size
    if tokens is None or not all(0 <= t < vocab for t in tokens):
        raise ParamError("tokens", f"`tokens` must be a list of token ids in [0, {vocab})")
    return {"prompt": service.text.decode(tokens)}


def tokenizer_info(service: Service) -> dict[str, Any]:
    """The fields harnesses read: special tokens, chat template, lengths, stop ids."""
    tok = getattr(service.text, "tokenizer", None)
    special = lambda name: getattr(tok, name, None) if tok is not None else None  # noqa: E731
    caps = service.engine.capabilities
    return {
        "tokenizer_class": type(tok).__name__ if tok is not None else type(service.text).__name__,
        "eos_token": special("eos_token"),
        "bos_token": special("bos_token"),
        "pad_token": special("pad_token"),
        "unk_token": special("unk_token"),
        "chat_template": special("chat_template"),
        "model_max_length": caps.context_length,
        "vocab_size": caps.vocab_size,
        "stop_token_ids": list(service.text.stop_ids),
    }
