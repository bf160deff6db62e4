"""An OpenAI request body -> a validated :class:`ChainJob` (the chains it asks for), or a
:class:`ParamError` naming the request field (HTTP 400).

The power-sampling parameters ride in the body next to the OpenAI ones (with the
``openai`` client: ``extra_body={...}``): ``method`` (the MH kernel; old name ``sampler``),
``rule``, the schedule (``alpha``, ``tau``, ``block_size``, ``steps``, ``keying``),
``budget``, ``cost_aware``, every kernel's own parameters (e.g. ``beta``, ``tries``,
``try_temperatures``) and ``seed``; ``max_tokens`` caps the answer, the chain's response
length T being the next multiple of the block size; ``temperature`` t > 0 is alpha = 1/t;
``echo`` with ``logprobs`` asks for a prompt scored in one pass instead of a chain. The
fields are generated from the registry (:func:`power_fields`) and checked by the library's
own validators (:func:`presto_sgl.config.sampling_configs`), so a request is refused exactly
where the library would refuse it, the :class:`~presto_sgl.errors.ConfigError` told in the
request's field names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload

from .. import registry
from ..config import PowerConfig, PrestoConfig, capped_blocks, parameters, with_options
from ..errors import ConfigError
from ..fields import TEMPERATURE_RANGE, params_of

SERVER_SIDE = frozenset({"predictor", "online"})
"""Parameters only the server's flags set (its files, its learners)."""

LENGTH = "max_new_tokens"
"""The library's response length, the request's ``max_tokens`` (chat: or ``max_completion_tokens``)."""


def power_fields() -> tuple[str, ...]:
    """The power-sampling request fields: the registry's MH parameters (every registered
    kernel's included), less the length (``max_tokens``) and the server-side ones."""
    baseline = {p.name for spec in registry.BASELINES.values() for p in params_of(spec.params)}
    return tuple(p.name for p in parameters() if p.name not in SERVER_SIDE | baseline | {LENGTH}) + ("sampler",)


IGNORED = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})
"""OpenAI fields accepted and ignored (bookkeeping that does not shape an answer)."""

MAX_LOGPROBS = 20
"""Most top alternatives per position (``logprobs`` / ``top_logprobs``), as vLLM's default."""

COMMON = frozenset(
    {
        "model",
        "max_tokens",
        "n",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "return_token_ids",
        "logprobs",
        "logit_bias",
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        *IGNORED,
    }
)
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
            raise ConfigError(
                "max_n", self.max_n, f"{{max_n}} (={self.max_n!r}) must be an integer >= 1 (chains per request)"
            )


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
    max_tokens: int = 16  # the answer's cap (T = config.max_new_tokens: the next multiple of the block size)
    logprobs: int | None = None  # None: none; k: log p0 of each token and its k top alternatives
    echo: bool = False  # completions: the prompt before the answer
    include_usage: bool = True  # a stream's usage chunk (stream_options.include_usage)

    @property
    def scoring(self) -> bool:
        """``echo`` with ``logprobs``: the prompt scored in one pass, no power sampling."""
        return self.echo and self.logprobs is not None


def whole(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (``3`` or ``3.0``, as JSON Schema and vLLM
    take integers), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def token_ids(value: Any) -> list[int] | None:
    """``value`` as a non-empty list of token ids (whole numbers), else None."""
    if not isinstance(value, list) or not value:
        return None
    ids = [whole(t) for t in value]
    return ids if all(t is not None for t in ids) else None  # type: ignore[return-value]  # all() above proves no None; mypy cannot narrow the list


@overload
def _int(body: Mapping[str, Any], name: str, default: int, low: int) -> int: ...
@overload
def _int(body: Mapping[str, Any], name: str, default: int | None, low: int) -> int | None: ...
def _int(body: Mapping[str, Any], name: str, default: int | None, low: int) -> int | None:
    """``body[name]`` (``default`` when absent or null), an integer >= ``low``."""
    value = body.get(name)
    if value is None:
        return default
    n = whole(value)
    if n is None or n < low:
        raise ParamError(name, f"`{name}` (={str(value)[:80]}) must be an integer >= {low}")
    return n


def _stop(value: Any) -> tuple[str, ...]:
    """``stop``: a string or a list of strings (any number, as vLLM takes them)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise ParamError("stop", f"`stop` (={str(value)[:80]}) must be a non-empty string or a list of them")
    return tuple(items)


def _prompts(value: Any) -> tuple[Any, ...]:
    """A completions ``prompt``: text, token ids, or a list of either (one entry per prompt)."""
    if isinstance(value, str):
        return (value,)
    if (ids := token_ids(value)) is not None:
        return (ids,)
    if isinstance(value, list) and value and all(isinstance(v, str) or token_ids(v) is not None for v in value):
        return tuple(v if isinstance(v, str) else token_ids(v) for v in value)
    raise ParamError(
        "prompt", f"`prompt` (={str(value)[:80]}) must be a string, a list of token ids, or a non-empty list of either"
    )


def _refuse(body: Mapping[str, Any], kind: str) -> None:
    """400 for fields this server does not serve, naming each."""
    unknown = sorted(set(body) - fields(kind))
    if unknown:
        listed = [f for f in power_fields() if f != "sampler"] + ["seed", "max_tokens"]
        raise ParamError(
            unknown[0], f"unrecognized request field `{unknown[0]}`; the power-sampling fields are {listed}"
        )
    unsupported = {
        "logit_bias": bool(body.get("logit_bias")),
        "top_p": body.get("top_p") not in (None, 1),
        "suffix": body.get("suffix") is not None,
        "tools": bool(body.get("tools")),
        "tool_choice": body.get("tool_choice") not in (None, "none"),
        "presence_penalty": body.get("presence_penalty") not in (None, 0),
        "frequency_penalty": body.get("frequency_penalty") not in (None, 0),
        "response_format": body.get("response_format") not in (None, {"type": "text"}),
    }
    for name, bad in unsupported.items():
        if bad:
            why = " (the chain samples the full vocabulary)" if name == "top_p" else ""
            raise ParamError(
                name, f"`{name}` (={str(body[name])[:80]}) is not supported by power sampling{why}; drop it"
            )
    if body.get("best_of") not in (None, body.get("n", 1)):
        raise ParamError("best_of", "`best_of` is not supported; power sampling returns each of its `n` chains")


def request_error(exc: ConfigError, names: Mapping[str, str]) -> ParamError:
    """A library ConfigError as a ParamError: its parameters told as request fields (``names``
    maps the library's names that differ, e.g. max_new_tokens -> max_tokens)."""
    field = lambda p: names.get(p, p)  # noqa: E731
    return ParamError(field(exc.param) if exc.param else None, exc.render(field))


def _logprobs(body: Mapping[str, Any], kind: str) -> int | None:
    """How many top alternatives per token (None: no log-probs). Completions: ``logprobs`` k;
    chat: ``logprobs`` true, with ``top_logprobs`` k (0 unless given)."""
    if kind == "completions":
        raw = body.get("logprobs")
        k = whole(raw)
        if raw is not None and (k is None or not 0 <= k <= MAX_LOGPROBS):
            raise ParamError(
                "logprobs", f"`logprobs` (={str(raw)[:80]}) must be an integer in [0, {MAX_LOGPROBS}] or null"
            )
        return k
    on, raw = body.get("logprobs"), body.get("top_logprobs")
    if on is not None and not isinstance(on, bool):
        raise ParamError("logprobs", f"`logprobs` (={str(on)[:80]}) must be true or false")
    k = whole(raw)
    if raw is not None:
        if k is None or not 0 <= k <= MAX_LOGPROBS:
            raise ParamError(
                "top_logprobs", f"`top_logprobs` (={str(raw)[:80]}) must be an integer in [0, {MAX_LOGPROBS}]"
            )
        if not on:
            raise ParamError("top_logprobs", "`top_logprobs` needs `logprobs: true`")
    return (k or 0) if on else None


def _temperature(body: Mapping[str, Any], overrides: dict[str, Any], names: dict[str, str]) -> None:
    """``temperature`` t > 0 sets alpha = 1/t (the target p0^alpha is p0 at sequence-level
    temperature 1/alpha); t = 0, what harnesses send for greedy decoding, keeps the configured
    alpha (the sharpest target configured); absent, likewise."""
    t = body.get("temperature")
    if t is None:
        return
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
        raise ParamError("temperature", f"`temperature` (={str(t)[:80]}) must be a number >= 0")
    if t == 0:
        return
    low, high = TEMPERATURE_RANGE
    if not low <= t <= high:
        raise ParamError(
            "temperature",
            f"`temperature` (={t!r}) must be 0 or in [{low:g}, {high:g}] (it sets alpha = "
            "1/temperature, and the proposal temperature 1/alpha must be in that range)",
        )
    alpha = 1.0 / t
    if "alpha" in overrides and abs(float(overrides["alpha"]) - alpha) > 1e-9 * alpha:
        raise ParamError(
            "temperature",
            f"`temperature` (={t!r}) sets alpha = 1/temperature = {alpha:g}, but `alpha` "
            f"(={overrides['alpha']!r}) is sent too; send one of them",
        )
    if "alpha" not in overrides:
        overrides["alpha"], names["alpha"] = alpha, "temperature"


def _length(body: Mapping[str, Any], field: str, defaults: Defaults, overrides: dict[str, Any], scoring: bool) -> int:
    """The answer's cap ``max_tokens`` (0 or 1 when scoring); sets the chain's length T, the
    smallest multiple of the block size >= the cap, with the block size min(the request's or
    else the server's, cap) (:func:`~presto_sgl.config.capped_blocks`)."""
    if scoring:
        cap = _int(body, field, 0, 0)
        if cap > 1:
            raise ParamError(
                field,
                f"`{field}` (={cap}) must be 0 or 1 with `echo` and `logprobs`: the prompt is "
                "scored in one pass (no power sampling), plus the greedy next token when 1",
            )
        return cap
    cap = _int(body, field, defaults.config.max_new_tokens, 1)
    block = overrides.setdefault("block_size", defaults.config.block_size)
    if isinstance(block, int) and not isinstance(block, bool) and block >= 1:
        overrides[LENGTH], overrides["block_size"] = capped_blocks(cap, block)
    else:
        overrides[LENGTH] = cap
    return cap


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
    if n > defaults.max_n:
        raise ParamError("n", f"`n` (={n}) exceeds this server's limit of {defaults.max_n} chains per request")
    seed = _int(body, "seed", defaults.seed, 0)
    for name in ("stream", "return_token_ids", "echo"):  # null: false, as OpenAI's API reads it
        if not isinstance(body.get(name) or False, bool):
            raise ParamError(name, f"`{name}` (={str(body[name])[:80]}) must be true or false")
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ParamError("stream_options", "`stream_options` applies only with `stream: true`")
        if (
            not isinstance(options, dict)
            or set(options) - {"include_usage", "continuous_usage_stats"}
            or not isinstance(options.get("include_usage", False), bool)
        ):
            raise ParamError(
                "stream_options", f'`stream_options` (={str(options)[:80]}) must be {{"include_usage": true|false}}'
            )
    logprobs = _logprobs(body, kind)
    echo = bool(body.get("echo"))
    scoring = echo and logprobs is not None
    if scoring and n != 1:
        raise ParamError("n", f"`n` (={n}) must be 1 with `echo` and `logprobs` (the prompt is scored once)")
    if logprobs and not scoring:
        field = "logprobs" if kind == "completions" else "top_logprobs"
        raise ParamError(
            field,
            f"`{field}` (={logprobs}) asks for top alternatives, which a power-sampling chain does "
            f"not keep; send {'`logprobs: 0`' if kind == 'completions' else '`top_logprobs: 0`'} for "
            "the log p0 of each answer token, or `echo: true` with `logprobs` to score a prompt",
        )
    method_field = "method" if body.get("method") is not None or body.get("sampler") is None else "sampler"
    names = {LENGTH: length, "kernel": method_field, "method": method_field}
    overrides = {k: body[k] for k in power_fields() if k != "sampler" and body.get(k) is not None}
    if body.get(method_field) is not None:
        overrides["kernel"] = overrides.pop("method", body.get(method_field))
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    _temperature(body, overrides, names)
    max_tokens = _length(body, length, defaults, overrides, scoring)
    if scoring:
        config, presto = defaults.config, defaults.presto
    else:
        try:
            config, presto = with_options(defaults.config, defaults.presto, overrides)
        except ConfigError as exc:
            raise request_error(exc, names) from None
    return ChainJob(
        kind,
        prompts,
        n,
        config,
        presto,
        seed,
        _stop(body.get("stop")),
        stream,
        bool(body.get("return_token_ids")),
        max_tokens,
        logprobs,
        echo,
        bool((options or {}).get("include_usage", False)) if stream else True,
    )
