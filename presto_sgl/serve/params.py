"""An OpenAI request body -> a validated :class:`ChainJob` (the chains it asks for), or a
:class:`ParamError` naming the request field (HTTP 400).

The power-sampling parameters ride in the body next to the OpenAI ones (with the
``openai`` client: ``extra_body={...}``): ``method`` (the MH kernel; old name ``sampler``),
``rule``, the schedule (``alpha``, ``tau``, ``block_size``, ``steps``, ``keying``),
``budget``, ``cost_aware``, every kernel's own parameters (e.g. ``beta``, ``tries``,
``try_temperatures``) and ``seed``; ``max_tokens`` is the fixed response length T. The
fields are generated from the registry (:func:`power_fields`) and checked by the library's
own validators (:func:`presto_sgl.config.sampling_configs`), so a request is refused exactly
where the library would refuse it, the :class:`~presto_sgl.errors.ConfigError` told in the
request's field names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import registry
from ..config import PowerConfig, PrestoConfig, parameters, with_options
from ..errors import ConfigError
from ..fields import params_of

SERVER_SIDE = frozenset({"predictor", "online"})
"""Parameters only the server's flags set (its files, its learners)."""

LENGTH = "max_new_tokens"
"""The library's response length, the request's ``max_tokens`` (chat: or ``max_completion_tokens``)."""


def power_fields() -> tuple[str, ...]:
    """The power-sampling request fields: the registry's MH parameters (every registered
    kernel's included), less the length (``max_tokens``) and the server-side ones."""
    baseline = {p.name for spec in registry.BASELINES.values() for p in params_of(spec.params)}
    return tuple(p.name for p in parameters()
                 if p.name not in SERVER_SIDE | baseline | {LENGTH}) + ("sampler",)


IGNORED = frozenset({"temperature", "top_p", "user", "stream_options", "presence_penalty", "frequency_penalty",
                     "metadata", "store", "service_tier", "parallel_tool_calls"})
"""OpenAI fields accepted and ignored: the target is p0^alpha and the proposal is q_tau, so
the sampling knobs of plain decoding do not apply (``tau`` sets the proposal temperature).
``presence_penalty`` / ``frequency_penalty`` are accepted only at 0."""

COMMON = frozenset({"model", "max_tokens", "n", "seed", "stop", "stream", "return_token_ids", "logprobs", "logit_bias",
                    *IGNORED})
KIND_FIELDS = {
    "completions": COMMON | {"prompt", "echo", "best_of", "suffix"},
    "chat": COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "response_format"},
}


def fields(kind: str) -> frozenset[str]:
    """Every field a request of ``kind`` may send."""
    return KIND_FIELDS[kind] | set(power_fields())


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
            raise ConfigError("seed", self.seed, f"{{seed}} (={self.seed!r}) must be an integer or None")
        if isinstance(self.max_n, bool) or not isinstance(self.max_n, int) or self.max_n < 1:
            raise ConfigError("max_n", self.max_n, f"{{max_n}} (={self.max_n!r}) must be an integer >= 1 (chains per request)")


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
    unknown = sorted(set(body) - fields(kind))
    if unknown:
        listed = [f for f in power_fields() if f != "sampler"] + ["seed", "max_tokens"]
        raise ParamError(unknown[0], f"unrecognized request field `{unknown[0]}`; the power-sampling fields are {listed}")
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


def request_error(exc: ConfigError, names: Mapping[str, str]) -> ParamError:
    """A library ConfigError as a ParamError: its parameters told as request fields (``names``
    maps the library's names that differ, e.g. max_new_tokens -> max_tokens)."""
    field = lambda p: names.get(p, p)  # noqa: E731
    return ParamError(field(exc.param) if exc.param else None, exc.render(field))


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
    method_field = "method" if body.get("method") is not None or body.get("sampler") is None else "sampler"
    names = {LENGTH: length, "kernel": method_field, "method": method_field}
    overrides = {k: body[k] for k in power_fields() if k != "sampler" and body.get(k) is not None}
    if body.get(method_field) is not None:
        overrides["kernel"] = overrides.pop("method", body.get(method_field))
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    max_tokens = _int(body, length, defaults.config.max_new_tokens, 1)
    try:
        config, presto = with_options(defaults.config, defaults.presto, {**overrides, LENGTH: max_tokens})
    except ConfigError as exc:
        raise request_error(exc, names) from None
    return ChainJob(kind, prompts, n, config, presto, seed, _stop(body.get("stop")), body.get("stream", False),
                    body.get("return_token_ids", False))
