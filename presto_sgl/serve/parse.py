"""A request body -> a validated :class:`ChainJob` (the chains it asks for; a structured
request's grammar in its target's constraint), or a
:class:`~.request.ParamError` naming the field (HTTP 400): each field checked by its
declaration in the field table (:mod:`.fieldtable`), then what the server checks across
fields, and the power-sampling fields applied to the server's configs as a typed replace
(:func:`presto_sgl.config.method_config` on the server's), whose ConfigError is told in the
request's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from .. import registry
from ..build import constrained
from ..config import MethodConfig, PowerConfig, PrestoConfig, alpha_of_temperature, capped, method_config
from ..constraints import GRAMMARS, Constraint
from ..engines.grammar import check as check_grammar
from ..errors import ConfigError
from .fieldtable import OPENAI, power_fields, request_fields
from .request import LENGTH, Defaults, ParamError, ServerFacts
from .schema import describe, token_ids, whole


@dataclass(frozen=True)
class ChainJob:
    """What one request asks for: ``n`` chains per prompt of ``config`` / ``presto``."""

    kind: str  # "completions" or "chat"
    prompts: tuple[Any, ...]  # completions: str or token ids each; chat: one message list
    n: int
    config: PowerConfig
    _: KW_ONLY
    presto: PrestoConfig
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    return_token_ids: bool
    max_tokens: int = 16  # the answer's cap (T = config.max_new_tokens: the next multiple of the block size)
    logprobs: int | None = None  # None: none; k: log p0 of each token and its k top alternatives
    echo: bool = False  # completions: the prompt before the answer
    include_usage: bool = True  # a stream's usage chunk (stream_options.include_usage)
    constraint_field: str | None = None  # the field the target's constraint came from

    @property
    def scoring(self) -> bool:
        """``echo`` with ``logprobs``: the prompt scored in one pass, no power sampling."""
        return self.echo and self.logprobs is not None


def request_error(exc: ConfigError, names: Mapping[str, str]) -> ParamError:
    """A library ConfigError as a ParamError: its parameters told as request fields (``names``
    maps the library's names that differ, e.g. max_new_tokens -> max_tokens)."""
    field = lambda p: names.get(p, p)  # noqa: E731
    return ParamError(field(exc.param) if exc.param else None, exc.render(field))


def _checked(body: Mapping[str, Any], kind: str, served: ServerFacts) -> dict[str, Any]:
    """The body's non-null fields, each valid by its declaration; unknown fields refused."""
    declared = request_fields(kind)
    known = {f.name for f in declared}
    unknown = sorted(set(body) - known)
    if unknown:
        listed = [f.name for f in power_fields()] + ["seed", "max_tokens"]
        raise ParamError(
            unknown[0], f"unrecognized request field `{unknown[0]}`; the power-sampling fields are {listed}"
        )
    for f in declared:
        if f.checked and body.get(f.name) is not None:
            f.check(body[f.name], served, kind)
    return {k: v for k, v in body.items() if v is not None}


def _temperature(t: float | None, overrides: dict[str, Any], names: dict[str, str]) -> None:
    """``temperature`` as :func:`~presto_sgl.config.alpha_of_temperature` reads it: t > 0 sets
    alpha = 1/t; t = 0 (greedy) or absent keeps the configured alpha."""
    try:
        alpha = alpha_of_temperature(t, overrides.get("alpha"))
    except ConfigError as exc:
        raise request_error(exc, names) from None
    if alpha is not None and "alpha" not in overrides:
        overrides["alpha"], names["alpha"] = alpha, "temperature"


def _length(cap: int | None, field: str, defaults: Defaults, overrides: dict[str, Any], scoring: bool) -> int:
    """The answer's cap ``max_tokens`` (0 or 1 when scoring); sets the chain's length T, the
    smallest multiple of the block size >= the cap, with the block size min(the request's or
    else the server's, cap) (:func:`~presto_sgl.config.capped`)."""
    if scoring:
        cap = cap or 0
        if cap > 1:
            raise ParamError(
                field,
                f"`{field}` (={cap}) must be 0 or 1 with `echo` and `logprobs`: the prompt is "
                "scored in one pass (no power sampling), plus the greedy next token when 1",
            )
        return cap
    cap = defaults.config.target.max_new_tokens if cap is None else cap
    if cap < 1:
        raise ParamError(field, f"`{field}` (={cap}) must be an integer >= 1 (0 only with `echo` and `logprobs`)")
    overrides |= capped(cap, overrides.get("block_size", defaults.config.target.block))
    return cap


def parse(body: Any, kind: str, defaults: Defaults, *, vocab: int | None = None) -> ChainJob:
    """The validated job of a request ``body`` of ``kind`` ("completions" or "chat"): each field
    checked by its declaration, then what the server checks across fields."""
    if not isinstance(body, dict):
        raise ParamError(None, "the request body must be a JSON object")
    given = _checked(body, kind, ServerFacts(defaults, vocab=vocab))
    main = "messages" if kind == "chat" else "prompt"
    if main not in given:
        schema = next(f for f in OPENAI if f.name == main).schema(ServerFacts(defaults), kind)
        raise ParamError(main, f"`{main}` is required: {describe(schema)}")
    prompts = _prompts(given, kind)
    n = whole(given.get("n", 1)) or 1
    if given.get("best_of", n) != n:
        raise ParamError("best_of", "`best_of` is not supported; power sampling returns each of its `n` chains")
    stream = bool(given.get("stream"))
    if "stream_options" in given and not stream:
        raise ParamError("stream_options", "`stream_options` applies only with `stream: true`")
    logprobs = _logprob_count(given, kind)
    echo = bool(given.get("echo"))
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
    length = "max_completion_tokens" if "max_completion_tokens" in given else "max_tokens"
    names = {LENGTH: length}
    overrides = {f.name: given[f.name] for f in power_fields() if f.name in given}
    _temperature(given.get("temperature"), overrides, names)
    cap = whole(given[length]) if length in given else None
    max_tokens = _length(cap, length, defaults, overrides, scoring)
    constraint, constraint_field = _constraint(given)
    if constraint is not None:
        if scoring:
            raise ParamError(constraint_field, f"`{constraint_field}` does not apply to a scored prompt (`echo`)")
        overrides.setdefault("ending", "eos")  # the constrained space is the responses that end
    config, presto = (defaults.config, defaults.presto) if scoring else _configs(overrides, defaults, constraint, names)
    seed = whole(given["seed"]) if "seed" in given else defaults.seed
    include_usage = bool(given.get("stream_options", {}).get("include_usage", False)) if stream else True
    stop = given.get("stop", ())
    return ChainJob(
        kind,
        prompts,
        n,
        config,
        presto=presto,
        seed=seed,
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        stream=stream,
        return_token_ids=bool(given.get("return_token_ids")),
        max_tokens=max_tokens,
        logprobs=logprobs,
        echo=echo,
        include_usage=include_usage,
        constraint_field=constraint_field,
    )


def _prompts(given: Mapping[str, Any], kind: str) -> tuple[Any, ...]:
    """The chat's messages, or each completion prompt: a string or token ids."""
    if kind == "chat":
        return (given["messages"],)
    prompt = given["prompt"]
    entries = [prompt] if isinstance(prompt, str) or whole(prompt[0]) is not None else prompt
    return tuple(p if isinstance(p, str) else token_ids(p) for p in entries)


def _configs(
    overrides: Mapping[str, Any], defaults: Defaults, constraint: Constraint | None, names: Mapping[str, str]
) -> tuple[PowerConfig, PrestoConfig]:
    """The request's chain: the server's configs with the request's fields applied (typed
    replaces, :func:`~presto_sgl.config.method_config`), and its constraint."""
    try:
        base = MethodConfig(defaults.config.kernel.name, defaults.config, defaults.presto)
        m = method_config(overrides, base)
        if constraint is not None and m.is_kernel:
            m = constrained(m, constraint)
        if not isinstance(m.config, PowerConfig) or m.presto is None:
            kernels = list(registry.KERNELS)
            raise ConfigError("method", m.method, f"{{method}} (={m.method!r}) must be one of {kernels}")
        return m.config, m.presto
    except ConfigError as exc:
        raise request_error(exc, names) from None


def _constraint(given: Mapping[str, Any]) -> tuple[Constraint | None, str | None]:
    """The request's constraint (``response_format`` json_object / json_schema, ``regex``,
    ``json_schema``, ``ebnf``, ``min_tokens``) and the field that gave its grammar."""
    grammars: dict[str, dict[str, Any]] = {}
    fmt = given.get("response_format", {}).get("type", "text")
    if fmt == "json_object":
        grammars["response_format"] = {"json_schema": {"type": "object"}}
    elif fmt == "json_schema":
        grammars["response_format"] = {"json_schema": given["response_format"]["json_schema"]["schema"]}
    elif fmt == "structural_tag":
        tag = {k: v for k, v in given["response_format"].items() if k != "type"}
        grammars["response_format"] = {"structural_tag": tag}
    for name in GRAMMARS:
        if name in given:
            grammars[name] = {name: given[name]}
    if len(grammars) > 1:
        a, b = sorted(grammars)[:2]
        raise ParamError(b, f"send one grammar per request: `{a}` or `{b}`, not both")
    field, grammar = next(iter(grammars.items()), (None, {}))
    try:
        constraint = Constraint.of(**grammar, min_tokens=given.get("min_tokens"))
        if constraint is not None:
            check_grammar(constraint)
    except ConfigError as exc:
        raise request_error(exc, {kind: field or kind for kind in GRAMMARS}) from None
    if constraint is not None and field is None:
        field = "min_tokens"
    return constraint, field


def _logprob_count(given: Mapping[str, Any], kind: str) -> int | None:
    """How many top alternatives per token (None: no log-probs). Completions: ``logprobs`` k;
    chat: ``logprobs`` true, with ``top_logprobs`` k (0 unless given)."""
    if kind == "completions":
        return whole(given["logprobs"]) if "logprobs" in given else None
    on = bool(given.get("logprobs"))
    if "top_logprobs" in given and not on:
        raise ParamError("top_logprobs", "`top_logprobs` needs `logprobs: true`")
    return (whole(given.get("top_logprobs", 0)) or 0) if on else None
