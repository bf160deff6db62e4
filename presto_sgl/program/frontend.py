"""``power_gen``: exact power sampling as an expression of SGLang programs.

Inside an ``@sgl.function`` body, ``s += power_gen("answer", max_tokens=..., stop=...,
alpha=..., rule=...)`` samples a response y approximately from

    pi_alpha(y | x) ∝ p0(y | x)^alpha,      x = the program's text so far,

with PowerMH (``rule="sequential"``) or PreSTO (``rule="step"``, the default, or any
registered rule and kernel), through the token-level :class:`SGLangEngine` on the program's
backend (its ``RuntimeEndpoint`` URL; ``engine=`` replaces it). It composes like
``sgl.gen``: ``s["answer"]`` and ``s.get_meta_info("answer")`` are set, the answer's text is
appended to the program, ``.run``, ``.run_batch(num_threads=N)`` and ``s.fork(n)`` (one chain
per fork) work; :mod:`presto_sgl.program.interpreter` has the two interpreter hooks this takes. The
chains of one engine that run at once (forks, run_batch's threads) share its scheduler
(:mod:`presto_sgl.scheduling.scheduler`: prefetching capped by the server's load).

``sgl.gen``'s vocabulary: ``max_tokens`` caps the answer. The chain's response length T is
``max_tokens`` rounded up to a multiple of ``min(block_size, max_tokens)`` (``block_size``
default 16) and its response is cut back to ``max_tokens``; under such a cap the default target
is ``"eos"`` (the responses that end at the model's stop token: a short answer stops paying for
the cap on every MH step; ``target="fixed"`` gives the paper's fixed length, and an engine
whose model has no stop token falls back to it). ``max_new_tokens`` instead sets T exactly
(the fixed target unless ``target`` says otherwise).
The answer ends at the model's first stop token (an EOS id of the tokenizer or of the
generation config), at any of ``stop_token_ids``, and before the first of the ``stop``
strings, whichever comes first (``finish_reason`` in the meta info says which).
``return_logprob=True`` adds ``output_token_logprobs`` in SGLang's shape, ``[log p0, id, None]``
per answer token. Left unset, ``max_tokens``, ``stop``, ``stop_token_ids`` and ``return_logprob``
take the program's run-level values as ``sgl.gen``'s do (``program.run(max_new_tokens=128,
stop=...)``; :data:`RUN_DEFAULTS`). ``name`` may be omitted, as for ``sgl.gen`` (the answer is
appended to the text). ``temperature`` t > 0 sets alpha = 1/t, as ``serve`` reads it (0, greedy,
keeps alpha). ``choices=[...]`` (or :func:`power_select`, ``sgl.select``'s drop-in) draws one
choice c from p0(c | x)^alpha exactly, from one scoring pass. ``regex``, ``json_schema``,
``dtype`` and ``min_tokens`` (``min_new_tokens``) restrict the chain's target to the answers
they allow, sampled exactly (structured power sampling, docs/design.md §2.2; the target is then
eos); ``stop_regex`` ends the answer before its first match, as ``stop`` strings do. Arguments
``sgl.gen`` has and power_gen cannot honour exactly (``n``, ``top_p``, penalties, ...:
:data:`REFUSED`) are refused by name with the reason; so is ``steps=0``.

Randomness: without ``seed`` every call draws a seed from the OS; with one, the chain id
is a hash of the call's place in the program (its :class:`~presto_sgl.program.interpreter.Lineage`:
the forks above it and the power_gen calls before it), so the calls and forks of a program
draw distinct chains and a rerun with the same seed draws the same ones. Both are recorded
in the meta info (``seed``, ``chain_id``); ``power_gen(..., seed=S, chain_id=C)`` replays a
chain (token for token on a seeded engine).

Token ids, never a text round trip: the program text is tokenized once, as the server
tokenizes text; a state keeps the exact ids of its text (prompt ids + the kept answer ids),
and a later power_gen on it or its forks starts from those ids and tokenizes only the text
appended since (``meta["prompt_source"]``: ``"text"``, ``"ids"`` or ``"ids+text"``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import secrets
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .. import registry
from ..build import MethodConfig, constrained, ending_default, make_method
from ..build import method_config as _method_config
from ..chain.keys import SEED_MASK, hash64
from ..config import PowerConfig, Target, alpha_of_temperature, capped_blocks, parameters
from ..constraints import Constraint
from ..engines import grammar
from ..engines.scoring import scorer
from ..engines.sglang.http import SGLangEngine
from ..errors import ConfigError
from ..execution.choices import draw_choice
from ..methods import Method
from ..scheduling.scheduler import Scheduler
from . import interpreter
from .state import ChoiceSpec, GenSpec, prompt_ids, record, record_choice

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


_engines: dict[str, SGLangEngine] = {}
_engines_lock = threading.Lock()
_schedulers: weakref.WeakKeyDictionary[Any, Scheduler] = weakref.WeakKeyDictionary()


class PowerGen:
    """``power_gen(name, *, max_tokens=None, stop=None, stop_token_ids=None, return_logprob=False,
    temperature=None, choices=None, regex=None, json_schema=None, dtype=None, min_tokens=None,
    stop_regex=None, seed=None, chain_id=None, engine=None, **options)``: a program expression
    (``s += ...``).

    ``options`` are the registry's parameters (``method``, ``rule``, ``max_new_tokens``,
    ``block_size``, ``steps``, ``alpha``, ``tau``, ``target`` ("eos": the chain's responses end at
    the model's stop token), ``budget``, the kernels' own such as ``beta``,
    ``tries`` and ``try_temperatures``; see ``inspect.signature(power_gen)``).
    """

    @property
    def __signature__(self) -> inspect.Signature:
        kw = inspect.Parameter.KEYWORD_ONLY
        head = [
            inspect.Parameter("name", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
            inspect.Parameter("max_tokens", kw, default=None, annotation=int | None),
            inspect.Parameter("stop", kw, default=None, annotation=str | list[str] | None),
            inspect.Parameter("stop_token_ids", kw, default=None, annotation=list[int] | None),
            inspect.Parameter("return_logprob", kw, default=False, annotation=bool),
            inspect.Parameter("temperature", kw, default=None, annotation=float | None),
            inspect.Parameter("choices", kw, default=None, annotation=list[str] | None),
            inspect.Parameter("regex", kw, default=None, annotation=str | None),
            inspect.Parameter("json_schema", kw, default=None, annotation=str | dict | None),
            inspect.Parameter("dtype", kw, default=None, annotation=type | str | None),
            inspect.Parameter("min_tokens", kw, default=None, annotation=int | None),
            inspect.Parameter("stop_regex", kw, default=None, annotation=str | list[str] | None),
            inspect.Parameter("ebnf", kw, default=None, annotation=str | None),
            inspect.Parameter("seed", kw, default=None, annotation=int | None),
            inspect.Parameter("chain_id", kw, default=None, annotation=int | None),
            inspect.Parameter("engine", kw, default=None),
        ]
        opts = [
            inspect.Parameter(p.name, kw, default=p.default)
            for p in parameters()
            if p.name not in ("predictor", "online")
        ]
        return inspect.Signature([*head, *opts])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(type(v).__name__ == "SglArgument" for v in (*args, *kwargs.values())):
            # SGLang traces a program with placeholder arguments (run_batch's prefix caching): it
            # reads only the expression's name, so validate nothing then
            return _expression_class()(args[0] if args else kwargs.get("name"), None)
        return expression(*args, **kwargs)


power_gen = PowerGen()


def _check_name(name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(
            "name",
            name,
            f"{{name}} (={name!r}) must be a non-empty string (the variable that receives the answer) or "
            "None (anonymous, as sgl.gen: the answer is only appended to the text)",
        )


def _check_keys(seed: Any, chain_id: Any) -> None:
    for arg, value in (("seed", seed), ("chain_id", chain_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MASK):
            raise ConfigError(arg, value, f"{{{arg}}} (={value!r}) must be an integer in [0, 2**63) or None")


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
    return_logprob: bool = False,
    seed: int | None = None,
    chain_id: int | None = None,
    engine: Any = None,
    temperature: float | None = None,
    regex: str | None = None,
    json_schema: Any = None,
    dtype: Any = None,
    min_tokens: int | None = None,
    min_new_tokens: int | None = None,
    stop_regex: str | Sequence[str] | None = None,
    ebnf: str | None = None,
    **options: Any,
) -> GenSpec:
    """The validated :class:`GenSpec` of a power_gen call; a ConfigError names the bad argument."""
    _check_name(name)
    for arg in REFUSED:
        if arg in options:
            raise ConfigError(
                arg,
                options[arg],
                f"{{{arg}}} is an sgl.gen argument that power_gen cannot honour ({REFUSED[arg]}); drop it",
            )
    _check_keys(seed, chain_id)
    _with_temperature(temperature, options)
    if isinstance(stop, str):
        stop = (stop,)
    if stop is not None and not all(isinstance(x, str) and x for x in stop):
        raise ConfigError("stop", stop, f"{{stop}} (={stop!r}) must be a non-empty string or a list of them")
    stop_regexes = _stop_regexes(stop_regex)
    if min_tokens is not None and min_new_tokens is not None and min_tokens != min_new_tokens:
        raise ConfigError("min_new_tokens", min_new_tokens, "give {min_tokens} or {min_new_tokens}, not both")
    constraint = Constraint.of(
        regex=regex,
        json_schema=json_schema,
        dtype=dtype,
        min_tokens=min_tokens if min_tokens is not None else min_new_tokens,
        ebnf=ebnf,
    )
    ids = tuple(stop_token_ids or ())
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ConfigError(
            "stop_token_ids",
            stop_token_ids,
            f"{{stop_token_ids}} (={stop_token_ids!r}) must be token ids (integers >= 0)",
        )
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError("max_tokens", max_tokens, f"{{max_tokens}} (={max_tokens!r}) must be an integer >= 1")
        if "max_new_tokens" in options:
            raise ConfigError(
                "max_new_tokens",
                options["max_new_tokens"],
                "pass {max_tokens} (the answer's cap; "
                "the response is rounded up to whole blocks) or {max_new_tokens} (the exact response "
                "length), not both",
            )
        staged = not _is_baseline(options) or "block_size" in registry.BASELINES[options["method"]].uses
        block = options.setdefault("block_size", Target.block_size) if staged else None
        if block is None:  # one stage: the cap itself
            options["max_new_tokens"] = max_tokens
        elif isinstance(block, int) and not isinstance(block, bool) and block >= 1:
            options["max_new_tokens"], options["block_size"] = capped_blocks(max_tokens, block)
    # a cap on an answer that ends at EOS: the responses that end (a short answer stops paying for
    # the cap on every MH step); target="fixed" gives the paper's, max_new_tokens an exact length
    default_eos = (max_tokens is not None or constraint is not None) and "target" not in options
    default_eos = default_eos and not _is_baseline(options)
    if default_eos:
        options["target"] = "eos"
    method = method_config(options)
    if constraint is not None:
        grammar.check(constraint)
        method = constrained(method, constraint)
    if isinstance(method.config, PowerConfig) and method.config.kernel.steps == 0:
        raise ConfigError(
            "steps",
            0,
            "{steps} (=0) runs no MH transition: the answer would be a plain draw at tau, not power "
            "sampling; use steps >= 1 (default 10), or method='lowtemp' for that draw",
        )
    return GenSpec(
        name,
        method,
        max_tokens,
        tuple(stop or ()),
        ids,
        bool(return_logprob),
        seed,
        chain_id,
        engine,
        default_eos,
        stop_regexes,
    )


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
    return ChoiceSpec(name, tuple(choices), Target(alpha=alpha).alpha, seed, chain_id, engine)


def spec_of(*args: Any, **kwargs: Any) -> GenSpec | ChoiceSpec:
    """The validated spec of a power_gen call: a chain's, or with ``choices`` a choice's."""
    return choice_spec(*args, **kwargs) if kwargs.get("choices") is not None else gen_spec(*args, **kwargs)


def expression(*args: Any, **kwargs: Any) -> Any:
    """The ``SglGen`` of a power_gen call for ``s += ...``, validated now (installs the interpreter hooks)."""
    spec = spec_of(*args, **kwargs)
    cls = _expression_class()
    interpreter.install(_run_expression)
    return cls(spec.name, spec, {**kwargs, "name": spec.name})


def power_select(
    name: str | None = None,
    choices: Sequence[str] = (),
    temperature: float | None = None,
    *,
    alpha: float | None = None,
    seed: int | None = None,
    chain_id: int | None = None,
    engine: Any = None,
) -> Any:
    """``sgl.select``'s drop-in: ``s += power_select("pick", ["yes", "no"])`` draws a choice c
    from pi(c) ∝ p0(c | x)^alpha (alpha = 1/temperature when temperature > 0; default 4), exactly,
    from one scoring pass (:mod:`presto_sgl.execution.choices`)."""
    return power_gen(
        name, choices=choices, temperature=temperature, alpha=alpha, seed=seed, chain_id=chain_id, engine=engine
    )


RUN_DEFAULTS = {
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "return_logprob": "return_logprob",
}
"""``program.run(...)``'s sampling defaults that power_gen takes, as ``sgl.gen`` does, where the
call leaves them unset (run's ``max_new_tokens`` is sgl.gen's ``max_tokens``). Run's
``temperature``, ``top_p``, penalties ... are for ``sgl.gen`` only: power_gen's target is fixed."""


def with_run_defaults(call: dict[str, Any], defaults: Any) -> dict[str, Any]:
    """``call`` (a power_gen call's keyword arguments) completed by the program's
    ``default_sampling_para`` (``program.run(max_new_tokens=..., stop=...)``) where unset."""
    out = dict(call)
    for field, arg in RUN_DEFAULTS.items():
        value = getattr(defaults, field, None)
        unset = out.get(arg) is None and not (arg == "max_tokens" and "max_new_tokens" in out)
        if unset and value not in (None, [], ()):
            out[arg] = value
    return out


def _no_sglang(exc: ImportError) -> ImportError:
    return ImportError(
        f"power_gen needs sglang's frontend ({exc}); run from .venv-sglang (`bash scripts/install_sglang.sh`)"
    )


@functools.cache
def _expression_class() -> type:
    """The ``SglGen`` subclass of power_gen expressions (defined once sglang is importable)."""
    try:
        from sglang.lang.ir import SglExpr, SglGen
    except ImportError as exc:
        raise _no_sglang(exc) from exc

    class PowerGenExpr(SglGen):
        """``SglGen`` to the interpreter (variable events, forks); run by the presto-sgl hook."""

        presto_power_gen = True

        def __init__(self, name: str, spec: GenSpec | None, call: dict[str, Any] | None = None) -> None:
            SglExpr.__init__(self)
            self.name, self.spec, self.call = name, spec, call

        @property
        def sampling_params(self) -> Any:  # only SGLang's own gen path reads it: the hook did not run
            raise RuntimeError(
                "a power_gen expression reached SGLang's sgl.gen path: presto-sgl's interpreter "
                "hook is not installed (import power_gen from presto_sgl.program)"
            )

        def __repr__(self) -> str:
            return f"PowerGen({self.name!r})"

    return PowerGenExpr


def _run_expression(executor: Any, expr: Any) -> None:
    """What the interpreter hook runs for a power_gen expression (on the program's thread): its
    call with the program's run-level defaults where it left them unset."""
    if isinstance(expr.spec, ChoiceSpec):
        _run_choice(executor, expr.spec)
    else:
        _run(executor, gen_spec(**with_run_defaults(expr.call, executor.default_sampling_para)))


def _keys(executor: Any, spec: GenSpec | ChoiceSpec) -> tuple[int, int]:
    """The call's (seed, chain id): as given, else a fresh seed and the hash of the call's place
    in the program (which this counts)."""
    place = interpreter.next_call(executor)
    seed = spec.seed if spec.seed is not None else secrets.randbits(63)
    chain_id = spec.chain_id if spec.chain_id is not None else hash64("power_gen", place.path, place.calls) & SEED_MASK
    return seed, chain_id


def _run_choice(executor: Any, spec: ChoiceSpec) -> None:
    """Draw ``spec``'s choice after ``executor``'s text and record it."""
    eng = spec.engine if spec.engine is not None else _engine_for(executor.backend)
    text = executor.text_
    ids, source = prompt_ids(executor.variables, text, eng)
    if not ids:
        raise ValueError(f"power_gen {spec.name!r}: the program text before it is empty; choices need a prompt")
    seed, chain_id = _keys(executor, spec)
    options = [tuple(eng.text.encode(c)) for c in spec.choices]
    drawn = draw_choice(scorer(eng), ids, options, spec.alpha, seed=seed, prompt_id=chain_id)
    record_choice(executor, spec, text, ids, source, options, drawn, seed, chain_id)


def _run(executor: Any, spec: GenSpec) -> None:
    """Run ``spec``'s chain on ``executor``'s text (on its thread, or with the executor idle) and
    record the answer."""
    eng = spec.engine if spec.engine is not None else _engine_for(executor.backend)
    chain = make_method(eng, _on_engine(spec, eng))
    text = executor.text_
    ids, source = prompt_ids(executor.variables, text, eng)
    _check_prompt(chain, ids, spec.name)
    seed, chain_id = _keys(executor, spec)
    scheduler = _scheduler_for(eng)
    scheduler.adopt(chain)
    start = time.perf_counter()
    with scheduler.chain() as lane:
        result = chain.run(ids, seed=seed, prompt_id=chain_id, lane=lane)
    meta = {"e2e_latency": time.perf_counter() - start, "seed": seed, "chain_id": chain_id}
    record(executor, spec, eng, chain, text, ids, source, result, meta)


def _on_engine(spec: GenSpec, eng: Any) -> MethodConfig:
    """``spec``'s method on ``eng``: the default EOS-terminated target where ``eng`` can end
    there, else the fixed one (:func:`~presto_sgl.build.ending_default`); a constrained target
    stays EOS-terminated (an engine that cannot end there is refused when the chain is built)."""
    m = spec.method
    if not spec.default_eos or (isinstance(m.config, PowerConfig) and m.config.target.constraint is not None):
        return m
    assert isinstance(m.config, PowerConfig)  # a kernel's: default_eos is never set for a baseline
    fixed = dataclasses.replace(m.config, target=dataclasses.replace(m.config.target, target="fixed"))
    config = ending_default(fixed, eng)
    return m if config == m.config else dataclasses.replace(m, config=config)


def method_config(options: dict[str, Any]) -> MethodConfig:
    """The validated method of ``power_gen``'s ``options`` (a ConfigError naming the argument)."""
    server_side = {"predictor", "online"} & set(options)
    if server_side:
        name = sorted(server_side)[0]
        raise ConfigError(
            name,
            options[name],
            f"{{{name}}} is not a power_gen argument (the predictor is the "
            "package's default); use the library's Sampler for it",
        )
    if isinstance(options.get("try_temperatures"), list):
        options["try_temperatures"] = tuple(options["try_temperatures"])
    return _method_config(options)


def _program_states(s: Any) -> list[Any]:
    try:
        from sglang.lang.interpreter import ProgramState, ProgramStateGroup
    except ImportError as exc:
        raise _no_sglang(exc) from exc
    if isinstance(s, ProgramStateGroup):
        states = list(s.states)
    elif isinstance(s, ProgramState):
        states = [s]
    else:
        states = list(s) if isinstance(s, (list, tuple)) else []
    if not states or not all(isinstance(st, ProgramState) for st in states):
        raise TypeError(
            f"`s` (a {type(s).__name__}) must be the program state of an @sgl.function body, a group from s.fork(n), "
            "or a list of program states"
        )
    return states


def _check_prompt(method: Method, ids: Sequence[int], name: str | None) -> None:
    """``method.check_prompt`` on the program text's ids; its ValueError says which power_gen and program text."""
    try:
        method.check_prompt(ids)
    except ValueError as exc:
        where = f"power_gen({name!r})"
        hint = "; add text first (e.g. s += sgl.user(...))" if not ids else ""
        raise ValueError(
            f"{where}: its prompt is the program text before it "
            f"({len(ids)} tokens) and cannot be sampled from: {exc}{hint}"
        ) from exc


def _scheduler_for(engine: Any) -> Scheduler:
    """The shared scheduler of an engine: the chains of a program's forks and of run_batch's
    threads that run at once share it (:mod:`presto_sgl.scheduling.scheduler`)."""
    with _engines_lock:
        if engine not in _schedulers:
            _schedulers[engine] = Scheduler(engine)
        return _schedulers[engine]


def _engine_for(backend: Any) -> SGLangEngine:
    """One cached :class:`SGLangEngine` per server URL of a ``RuntimeEndpoint`` backend."""
    url = getattr(backend, "base_url", None)
    if not isinstance(url, str):
        raise TypeError(
            f"power_gen runs on an SGLang server, but the program's backend is a {type(backend).__name__}; use "
            "sgl.set_default_backend(sgl.RuntimeEndpoint(url)) (or backend=...) or pass engine=SGLangEngine(url)"
        )
    with _engines_lock:
        if url not in _engines:
            _engines[url] = SGLangEngine(url)
        return _engines[url]
