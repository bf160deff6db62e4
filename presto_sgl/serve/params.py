"""An OpenAI request body -> a validated :class:`ChainJob` (the chains it asks for), or a
:class:`ParamError` naming the request field (HTTP 400).

The power-sampling parameters ride in the body next to the OpenAI ones (with the
``openai`` client: ``extra_body={...}``): ``alpha``, ``tau``, ``block_size``, ``steps``,
``sampler``, ``rule``, ``budget``, ``cost_aware``, ``beta``, ``tries``,
``try_temperatures`` and ``seed``; ``max_tokens`` is the fixed response length T. They are
checked by the library's own validators (:func:`presto_sgl.config.sampling_configs`), so a
request is refused exactly where the library would refuse it, the message naming the
request field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import PowerConfig, PrestoConfig, sampling_configs

POWER_FIELDS = ("alpha", "tau", "block_size", "steps", "sampler", "rule", "budget", "cost_aware", "beta", "tries",
                "try_temperatures")
"""Power-sampling fields a request may set (the server's defaults otherwise)."""

IGNORED = frozenset({"temperature", "top_p", "user", "stream_options", "presence_penalty", "frequency_penalty",
                     "metadata", "store", "service_tier", "parallel_tool_calls"})
"""OpenAI fields accepted and ignored: the target is p0^alpha and the proposal is q_tau, so
the sampling knobs of plain decoding do not apply (``tau`` sets the proposal temperature).
``presence_penalty`` / ``frequency_penalty`` are accepted only at 0."""

COMMON = frozenset({"model", "max_tokens", "n", "seed", "stop", "stream", "return_token_ids", "logprobs", "logit_bias",
                    *POWER_FIELDS, *IGNORED})
FIELDS = {
    "completions": COMMON | {"prompt", "echo", "best_of", "suffix"},
    "chat": COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "response_format"},
}
LIBRARY_NAMES = {"max_new_tokens": "max_tokens"}
"""Library parameter -> request field, where they differ."""


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
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"`seed` (={self.seed!r}) must be an integer or None")
        if isinstance(self.max_n, bool) or not isinstance(self.max_n, int) or self.max_n < 1:
            raise ValueError(f"`max_n` (={self.max_n!r}) must be an integer >= 1 (chains per request)")


@dataclass(frozen=True)
class ChainJob:
    """What one request asks for: ``n`` chains per prompt of ``config`` / ``presto``."""

    kind: str  # "completions" or "chat"
    prompts: tuple[Any, ...]  # completions: str or token ids each; chat: one message list
    n: int
    config: PowerConfig
    presto: PrestoConfig
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    return_token_ids: bool


def _int(body: Mapping[str, Any], name: str, default: int | None, low: int) -> int | None:
    """``body[name]`` (``default`` when absent or null), an integer >= ``low``."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ParamError(name, f"`{name}` (={value!r}) must be an integer >= {low}")
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items) or len(items) > 4:
        raise ParamError("stop", f"`stop` (={value!r}) must be a non-empty string or a list of up to 4 of them")
    return tuple(items)


def _prompts(value: Any) -> tuple[Any, ...]:
    """A completions ``prompt``: text, token ids, or a list of either (one entry per prompt)."""
    ids = lambda v: isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v)  # noqa: E731
    if isinstance(value, str) or ids(value):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) or ids(v) for v in value):
        return tuple(value)
    raise ParamError("prompt", f"`prompt` (={str(value)[:80]}) must be a string, a list of token ids, or a non-empty "
                     "list of either")


def _refuse(body: Mapping[str, Any], kind: str) -> None:
    """400 for fields this server does not serve, naming each."""
    unknown = sorted(set(body) - FIELDS[kind])
    if unknown:
        raise ParamError(unknown[0], f"unrecognized request field `{unknown[0]}`; the power-sampling fields are "
                         f"{list(POWER_FIELDS) + ['seed', 'max_tokens']}")
    unsupported = {
        "logprobs": body.get("logprobs") not in (None, False, 0),
        "top_logprobs": body.get("top_logprobs") not in (None, 0),
        "logit_bias": bool(body.get("logit_bias")),
        "echo": bool(body.get("echo")),
        "suffix": body.get("suffix") is not None,
        "tools": bool(body.get("tools")),
        "tool_choice": body.get("tool_choice") not in (None, "none"),
        "presence_penalty": body.get("presence_penalty") not in (None, 0),
        "frequency_penalty": body.get("frequency_penalty") not in (None, 0),
        "response_format": body.get("response_format") not in (None, {"type": "text"}),
    }
    for name, bad in unsupported.items():
        if bad:
            raise ParamError(name, f"`{name}` (={body[name]!r}) is not supported by power sampling; drop it")
    if body.get("best_of") not in (None, body.get("n", 1)):
        raise ParamError("best_of", "`best_of` is not supported; power sampling returns each of its `n` chains")


def field_names(message: str) -> str:
    """A library message, its parameter names made request field names."""
    for lib, field in LIBRARY_NAMES.items():
        message = message.replace(lib, field)
    return message


def _library_error(exc: Exception) -> ParamError:
    """A library ValueError / TypeError as a ParamError naming the first field it names."""
    message = field_names(str(exc))
    found = re.search(r"`([a-z_]+)`", message)
    return ParamError(found.group(1) if found else None, message)


def parse(body: Any, kind: str, defaults: Defaults) -> ChainJob:
    """The validated job of a request ``body`` of ``kind`` ("completions" or "chat")."""
    if not isinstance(body, dict):
        raise ParamError(None, "the request body must be a JSON object")
    _refuse(body, kind)
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ParamError("messages", "`messages` must be a non-empty list of {role, content} objects")
        prompts: tuple[Any, ...] = (messages,)
        length = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    else:
        if "prompt" not in body:
            raise ParamError("prompt", "`prompt` is required: a string, a list of token ids, or a list of either")
        prompts = _prompts(body["prompt"])
        length = "max_tokens"
    n = _int(body, "n", 1, 1)
    if n > defaults.max_n:  # type: ignore[operator]
        raise ParamError("n", f"`n` (={n}) exceeds this server's limit of {defaults.max_n} chains per request")
    seed = _int(body, "seed", defaults.seed, 0)
    for name in ("stream", "return_token_ids"):
        if not isinstance(body.get(name, False), bool):
            raise ParamError(name, f"`{name}` (={body[name]!r}) must be true or false")
    config, presto = defaults.config, defaults.presto
    power: dict[str, Any] = {
        "alpha": config.alpha, "tau": config.tau, "block_size": config.block_size, "steps": config.steps,
        "sampler": config.sampler, "beta": config.beta, "tries": config.tries,
        "try_temperatures": config.try_temperatures, "rule": presto.rule, "budget": presto.budget,
        "cost_aware": presto.cost_aware,
    }
    power.update({k: body[k] for k in POWER_FIELDS if body.get(k) is not None})
    if isinstance(power["try_temperatures"], list):
        power["try_temperatures"] = tuple(power["try_temperatures"])
    max_tokens = _int(body, length, config.max_new_tokens, 1)
    try:
        config, presto = sampling_configs(power.pop("rule"), budget=power.pop("budget"),
                                          cost_aware=power.pop("cost_aware"), predictor=presto.predictor,
                                          online=presto.online, max_new_tokens=max_tokens, **power)
    except (ValueError, TypeError) as exc:
        error = _library_error(exc)
        if error.param == "max_tokens" and length != "max_tokens":
            error = ParamError(length, str(error).replace("max_tokens", length))
        raise error from None
    return ChainJob(kind, prompts, n, config, presto, seed, _stop(body.get("stop")), body.get("stream", False),
                    body.get("return_token_ids", False))
