"""A ``power_gen`` call, validated once: its :class:`GenSpec` (a chain's) or :class:`ChoiceSpec`
(a choice's), built from the call's arguments when the expression is made, and completed by a
program's run-level defaults as typed replaces (:func:`with_run_defaults`). Importable without
sglang.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from .. import registry
from ..build import method_under
from ..chain.keys import SEED_MASK
from ..config import (
    SERVER_SIDE,
    MethodConfig,
    PowerConfig,
    Target,
    alpha_of_temperature,
    capped,
    parameters,
)
from ..constraints import GRAMMARS, Constraint
from ..errors import ConfigError
from ..fields import integer

REFUSED = {  # sgl.gen's arguments that a power-sampling chain cannot honour: why, and what to do instead
    "n": "fork the state: s.fork(n)",
    "top_p": "the chain samples the full vocabulary",
    "top_k": "the chain samples the full vocabulary",
    "min_p": "the chain samples the full vocabulary",
    "frequency_penalty": "penalties would change the target",
    "presence_penalty": "penalties would change the target",
    "ignore_eos": "the chain never stops at EOS; the answer does",
    "logprob_start_len": "return_logprob gives the answer's tokens",
    "top_logprobs_num": "not available",
    "return_text_in_logprobs": "not available",
}
"""``temperature`` is honoured (alpha = 1/temperature, as ``serve`` reads it), ``choices``
are drawn exactly from p0(c | x)^alpha (:func:`choice_spec`), and ``regex``, ``json_schema``,
``dtype``, ``min_tokens`` / ``min_new_tokens`` constrain the chain's target (structured power
sampling: :mod:`presto_sgl.constraints`)."""


@dataclass(frozen=True)
class GenSpec:
    """One power_gen call: the variable (None: anonymous), the validated method and what shapes the answer."""

    name: str | None
    method: MethodConfig
    max_tokens: int | None
    stop: tuple[str, ...]
    _: KW_ONLY
    stop_token_ids: tuple[int, ...]
    return_logprob: bool
    seed: int | None
    chain_id: int | None
    engine: Any
    default_eos: bool = False  # the target is eos because max_tokens capped the answer and none was given
    stop_regex: tuple[str, ...] = ()  # the answer ends before the first match of any of these
    given: frozenset[str] = frozenset()  # what the call set of RUN_DEFAULTS' arguments, max_new_tokens and ending


@dataclass(frozen=True)
class ChoiceSpec:
    """One power_gen call with ``choices``: the variable, the choices and alpha."""

    name: str | None
    choices: tuple[str, ...]
    alpha: float
    seed: int | None
    _: KW_ONLY
    chain_id: int | None
    engine: Any


def _check_name(name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(
            "name",
            name,
            f"{{name}} (={name!r}) must be a non-empty string (the variable that receives the answer) or "
            "None (anonymous, as sgl.gen: the answer is only appended to the text)",
        )


def _check_keys(seed: Any, chain_id: Any) -> None:
    key = integer(0, optional="fresh randomness, recorded in the meta info", high=SEED_MASK)
    key("seed", seed)
    key("chain_id", chain_id)


def _with_temperature(temperature: Any, options: dict[str, Any]) -> None:
    """``temperature`` as ``serve`` reads it: t > 0 sets alpha = 1/t, 0 (greedy) keeps alpha."""
    alpha = alpha_of_temperature(temperature, options.get("alpha"))
    if alpha is not None:
        options["alpha"] = alpha


def gen_spec(
    name: str | None = None,
    *,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    return_logprob: bool | None = None,
    seed: int | None = None,
    chain_id: int | None = None,
    engine: Any = None,
    temperature: float | None = None,
    dtype: Any = None,
    min_tokens: int | None = None,
    min_new_tokens: int | None = None,
    stop_regex: str | Sequence[str] | None = None,
    **options: Any,
) -> GenSpec:
    """The validated :class:`GenSpec` of a power_gen call; a ConfigError names the bad argument.
    ``options`` holds the grammar, by its kind's name (:data:`~presto_sgl.constraints.GRAMMARS`),
    and the method's parameters."""
    grammars = {kind: options.pop(kind) for kind in GRAMMARS if kind in options}
    _check_name(name)
    _refuse(options)
    _check_keys(seed, chain_id)
    _with_temperature(temperature, options)
    stop_regexes = _stop_regexes(stop_regex)
    if min_tokens is not None and min_new_tokens is not None and min_tokens != min_new_tokens:
        raise ConfigError("min_new_tokens", min_new_tokens, "give {min_tokens} or {min_new_tokens}, not both")
    min_tokens = min_tokens if min_tokens is not None else min_new_tokens
    constraint = Constraint.of(dtype=dtype, min_tokens=min_tokens, **grammars)
    if max_tokens is not None:
        _cap(max_tokens, options)
    # a cap on an answer that ends at EOS: the responses that end (a short answer stops paying for
    # the cap on every MH step); ending="fixed" gives the paper's, max_new_tokens an exact length
    default_eos = (max_tokens is not None or constraint is not None) and "ending" not in options
    default_eos = default_eos and not _is_baseline(options)
    if default_eos:
        options["ending"] = "eos"
    method = call_method(options, constraint)
    _check_steps(method)
    call = {"max_tokens": max_tokens, "stop": stop, "stop_token_ids": stop_token_ids, "return_logprob": return_logprob}
    given = {arg for arg, value in call.items() if value is not None} | ({"max_new_tokens", "ending"} & set(options))
    return GenSpec(
        name=name,
        method=method,
        max_tokens=max_tokens,
        stop=_stops(stop),
        stop_token_ids=_stop_ids(stop_token_ids),
        return_logprob=bool(return_logprob),
        seed=seed,
        chain_id=chain_id,
        engine=engine,
        default_eos=default_eos,
        stop_regex=stop_regexes,
        given=frozenset(given),
    )


def _refuse(options: Mapping[str, Any]) -> None:
    """A ConfigError naming the first sgl.gen argument power_gen cannot honour exactly."""
    for arg in REFUSED:
        if arg in options:
            raise ConfigError(
                arg,
                options[arg],
                f"{{{arg}}} is an sgl.gen argument that power_gen cannot honour ({REFUSED[arg]}); drop it",
            )


def _cap(max_tokens: Any, options: dict[str, Any]) -> None:
    """``max_tokens`` caps the answer: the response length (and block size) it sets, in ``options``."""
    _check_cap(max_tokens)
    if "max_new_tokens" in options:
        raise ConfigError(
            "max_new_tokens",
            options["max_new_tokens"],
            "pass {max_tokens} (the answer's cap; the response is rounded up to whole blocks) or "
            "{max_new_tokens} (the exact response length), not both",
        )
    staged = not _is_baseline(options) or "block_size" in registry.BASELINES[options["method"]].uses
    options |= capped(max_tokens, options.get("block_size", Target.block_size) if staged else None)


def _check_steps(method: MethodConfig) -> None:
    if isinstance(method.config, PowerConfig) and method.config.kernel.steps == 0:
        raise ConfigError(
            "steps",
            0,
            "{steps} (=0) runs no MH transition: the answer would be a plain draw at tau, not power "
            "sampling; use steps >= 1 (default 10), or method='lowtemp' for that draw",
        )


def _check_cap(max_tokens: Any) -> None:
    integer(1, "the answer's cap in tokens")("max_tokens", max_tokens)


def _stops(stop: Any) -> tuple[str, ...]:
    stops = (stop,) if isinstance(stop, str) else stop
    if stops is not None and not (isinstance(stops, Sequence) and all(isinstance(x, str) and x for x in stops)):
        raise ConfigError("stop", stop, f"{{stop}} (={stop!r}) must be a non-empty string or a list of them")
    return tuple(stops or ())


def _stop_ids(stop_token_ids: Any) -> tuple[int, ...]:
    ids = tuple(stop_token_ids or ())
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ConfigError(
            "stop_token_ids",
            stop_token_ids,
            f"{{stop_token_ids}} (={stop_token_ids!r}) must be token ids (integers >= 0)",
        )
    return ids


def _stop_regexes(stop_regex: Any) -> tuple[str, ...]:
    """``stop_regex`` (a pattern or a list of them) checked to compile."""
    patterns = (stop_regex,) if isinstance(stop_regex, str) else tuple(stop_regex or ())
    for p in patterns:
        try:
            re.compile(p)
        except (re.error, TypeError) as e:
            raise ConfigError(
                "stop_regex", stop_regex, f"{{stop_regex}} (={p!r}) is not a regular expression ({e})"
            ) from None
    return patterns


def _is_baseline(options: dict[str, Any]) -> bool:
    method = options.get("method", "powermh")
    return isinstance(method, str) and method in registry.BASELINES


CHAIN_ONLY = frozenset(p.name for p in parameters()) - {"alpha"}
"""The chain's parameters, which a choice (drawn from one scoring pass) has no use for."""


def choice_spec(
    name: str | None = None,
    *,
    choices: Sequence[str] = (),
    temperature: float | None = None,
    choices_method: Any = None,
    alpha: float | None = None,
    seed: int | None = None,
    chain_id: int | None = None,
    engine: Any = None,
    **ignored: Any,
) -> ChoiceSpec:
    """The validated :class:`ChoiceSpec` of ``power_gen(name, choices=[...])`` (or
    :func:`power_select`): pi(c) ∝ p0(c | x)^alpha over the choices. The length, stop and
    sampling arguments ``sgl.gen`` ignores next to ``choices`` are ignored here too; the chain's
    parameters are refused by name."""
    _check_name(name)
    _check_keys(seed, chain_id)
    if isinstance(choices, str) or not isinstance(choices, Sequence) or not choices:
        raise ConfigError("choices", choices, f"{{choices}} (={choices!r}) must be a non-empty list of strings")
    if not all(isinstance(c, str) and c for c in choices) or len(set(choices)) != len(choices):
        raise ConfigError("choices", choices, f"{{choices}} (={list(choices)!r}) must be distinct non-empty strings")
    if choices_method is not None:
        raise ConfigError(
            "choices_method",
            choices_method,
            "{choices_method} does not apply: power_gen draws a choice from p0(c | x)^alpha, exactly; drop it",
        )
    chain = sorted(CHAIN_ONLY & set(ignored))
    if chain:
        raise ConfigError(
            chain[0],
            ignored[chain[0]],
            f"{{{chain[0]}}} does not apply to choices: they are drawn exactly from one scoring pass, with no "
            "chain; drop it (alpha and temperature apply)",
        )
    alpha = alpha_of_temperature(temperature, alpha) or (Target.alpha if alpha is None else alpha)
    return ChoiceSpec(name, tuple(choices), Target(alpha=alpha).alpha, seed, chain_id=chain_id, engine=engine)


def spec_of(*args: Any, **kwargs: Any) -> GenSpec | ChoiceSpec:
    """The validated spec of a power_gen call: a chain's, or with ``choices`` a choice's."""
    return choice_spec(*args, **kwargs) if kwargs.get("choices") is not None else gen_spec(*args, **kwargs)


RUN_DEFAULTS = {
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "return_logprob": "return_logprob",
}
"""``program.run(...)``'s sampling defaults that power_gen takes, as ``sgl.gen`` does, where the
call leaves them unset (run's ``max_new_tokens`` is sgl.gen's ``max_tokens``). Run's
``temperature``, ``top_p``, penalties ... are for ``sgl.gen`` only: power_gen's target is fixed."""


def with_run_defaults(spec: GenSpec, defaults: Any) -> GenSpec:
    """``spec`` completed by the program's ``default_sampling_para`` (``program.run(max_new_tokens=...,
    stop=...)``) where its call left them unset, as typed replaces: each run-level value is checked
    once, and a cap sets the target's length (and the responses that end, unless the call named an
    ending) as ``max_tokens`` in the call would have."""
    unset = {
        arg: value
        for field, arg in RUN_DEFAULTS.items()
        if arg not in spec.given
        and not (arg == "max_tokens" and "max_new_tokens" in spec.given)
        and (value := getattr(defaults, field, None)) not in (None, [], ())
    }
    if not unset:
        return spec
    changes: dict[str, Any] = {}
    if "stop" in unset:
        changes["stop"] = _stops(unset["stop"])
    if "stop_token_ids" in unset:
        changes["stop_token_ids"] = _stop_ids(unset["stop_token_ids"])
    if "return_logprob" in unset:
        changes["return_logprob"] = bool(unset["return_logprob"])
    if "max_tokens" in unset:
        cap = unset["max_tokens"]
        _check_cap(cap)
        m = spec.method
        eos = "ending" not in spec.given and m.is_kernel
        fields: dict[str, Any] = capped(cap, m.config.target.block_size) | ({"ending": "eos"} if eos else {})
        target = dataclasses.replace(m.config.target, **fields)
        method = dataclasses.replace(m, config=dataclasses.replace(m.config, target=target))
        changes |= {"max_tokens": cap, "method": method, "default_eos": spec.default_eos or eos}
    return dataclasses.replace(spec, **changes)


def call_method(options: dict[str, Any], constraint: Constraint | None = None) -> MethodConfig:
    """The validated method of ``power_gen``'s ``options`` under ``constraint`` (a ConfigError
    naming the argument)."""
    server_side = SERVER_SIDE & set(options)
    if server_side:
        name = sorted(server_side)[0]
        raise ConfigError(
            name,
            options[name],
            f"{{{name}}} is not a power_gen argument (the predictor is the "
            "package's default); use the library's Sampler for it",
        )
    return method_under(options, constraint)
