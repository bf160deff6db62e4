"""Power sampling a whole SGLang program with no change to its code.

Inside ``with power_sampling(alpha=4.0, rule="step", ...)`` (or for ``power_sampled(program,
...).run(...)`` / ``.run_batch(...)``) every ``sgl.gen``, ``sgl.select``, ``sgl.gen_int`` and
``sgl.gen_string`` of the programs started there is power-sampled. Each call is the
``power_gen`` call of the same arguments (:func:`call_of`): ``max_tokens`` caps the answer,
``temperature`` > 0 gives alpha = 1/temperature (0, greedy, keeps the scope's alpha), ``regex``,
``json_schema``, ``dtype`` and ``min_new_tokens`` constrain the target, and ``choices`` are drawn
exactly from p0(c | x)^alpha (``choices_method`` does not apply). The scope's options are every
call's chain options (the method's parameters, ``seed``, ``engine``). A call asking for what
power sampling cannot honour exactly (``top_p`` < 1, penalties, ``n`` > 1, ...) is refused by
name; with ``fallback=True`` it runs as SGLang's own call instead, and its meta info says so
(``presto.power_sampled`` False, with the reason). Forks, ``run_batch``'s threads and streamed
programs keep their scope (:mod:`.interpreter`); a program started outside it is SGLang's,
untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..config import SERVER_SIDE, parameters
from ..errors import ConfigError
from . import interpreter
from .execution import run_expression, run_spec
from .spec import REFUSED, ChoiceSpec, GenSpec, choice_spec, gen_spec

NEUTRAL = {
    "n": 1,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "ignore_eos": False,
}
"""SGLang's sampling parameters at the values that change nothing: a call that sets one so asks
for nothing power sampling cannot honour."""

GEN_ARGS = {"max_new_tokens": "max_tokens"}
"""``sgl.gen``'s arguments whose ``SglSamplingParams`` field has another name (the rest keep theirs)."""


@dataclass(frozen=True)
class Scope:
    """A power-sampling scope: ``options`` go to every call (validated once), ``fallback`` runs
    a call power sampling cannot honour as SGLang's own instead of refusing it."""

    options: dict[str, Any] = field(default_factory=dict)
    fallback: bool = False

    def __post_init__(self) -> None:
        allowed = {p.name for p in parameters()} - SERVER_SIDE - {"max_new_tokens"} | {"seed", "engine"}
        for name in self.options:
            if name not in allowed:
                raise ConfigError(
                    name,
                    self.options[name],
                    f"{{{name}}} is not a power-sampling scope option: a call's own arguments (max_tokens, stop, "
                    "a grammar, ...) stay in the program; the scope takes the chain's options "
                    f"{sorted(allowed)}",
                )
        gen_spec(None, **self.options)  # every value checked once, by name

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Programs started in this thread within the block run in this scope (the hooks installed)."""
        install()
        with interpreter.scoped(self):
            yield


@contextmanager
def power_sampling(*, fallback: bool = False, **options: Any) -> Iterator[Scope]:
    """``with power_sampling(**options):`` the programs started in the block are power-sampled
    (module docstring). ``options`` are ``power_gen``'s chain options (``alpha``, ``method``,
    ``rule``, ``steps``, ``block_size``, ``budget``, the kernel's own, ``ending``, ``seed``,
    ``engine``)."""
    scope = Scope(dict(options), fallback)
    with scope.entered():
        yield scope


class PowerSampled:
    """``program`` whose ``run`` and ``run_batch`` are power-sampled in ``scope``; every other
    attribute is the program's."""

    def __init__(self, program: Any, scope: Scope) -> None:
        self.program, self.scope = program, scope

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self.scope.entered():
            return self.program.run(*args, **kwargs)

    def run_batch(self, *args: Any, **kwargs: Any) -> Any:
        with self.scope.entered():
            return self.program.run_batch(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.program, name)


def power_sampled(program: Any, *, fallback: bool = False, **options: Any) -> PowerSampled:
    """``program`` (an ``@sgl.function``) power-sampled with ``options`` whenever it runs
    (``power_sampled(qa, alpha=4.0).run(question=...)``); see :func:`power_sampling`."""
    return PowerSampled(program, Scope(dict(options), fallback))


def install() -> None:
    """The interpreter hooks of power_gen expressions and of scoped programs (once per process)."""
    interpreter.install(run_expression, run_in_scope)


def call_of(expr: Any) -> dict[str, Any]:
    """The ``power_gen`` arguments of an ``sgl.gen`` / ``sgl.gen_int`` / ``sgl.gen_string``
    (an ``SglGen``: the arguments it set) or ``sgl.select`` (an ``SglSelect``) expression."""
    if hasattr(expr, "choices"):  # SglSelect: choices_method is SGLang's heuristic, the draw here is exact
        return {"choices": list(expr.choices), "temperature": expr.temperature}
    params = vars(expr.sampling_params)
    return {
        GEN_ARGS.get(name, name): value
        for name, value in params.items()
        if value is not None and not (name in NEUTRAL and value == NEUTRAL[name])
    }


def spec_in_scope(name: str | None, call: dict[str, Any], scope: Scope) -> GenSpec | ChoiceSpec:
    """The spec of a call with arguments ``call`` in ``scope``: the call's own arguments, the
    scope's options for the rest (the call's temperature > 0 sets alpha over the scope's)."""
    options = dict(scope.options)
    if (call.get("temperature") or 0) > 0:
        options.pop("alpha", None)
    if "choices" in call:
        kept = {k: options[k] for k in ("alpha", "seed", "engine") if k in options}
        return choice_spec(name, **call, **kept)
    return gen_spec(name, **call, **options)


def run_in_scope(executor: Any, expr: Any, scope: Scope, own: Callable[[], None]) -> None:
    """An ``sgl.gen`` / ``sgl.select`` expression of a program in ``scope``: its power_gen call's
    chain or choice; a call asking what power sampling cannot honour is refused by name, or with
    ``fallback`` runs as SGLang's own (``own()``), its meta info saying why."""
    call = call_of(expr)
    unexact = sorted(set(call) & set(REFUSED))
    if unexact:
        if not scope.fallback:
            arg = unexact[0]
            raise ConfigError(
                arg,
                call[arg],
                f"sgl.gen's {{{arg}}} (={call[arg]!r}) cannot be power-sampled exactly ({REFUSED[arg]}); drop "
                "it, or enter the scope with fallback=True to run such calls as SGLang's own",
            )
        reason = "; ".join(f"{arg}: {REFUSED[arg]}" for arg in unexact)
        _as_sglang(executor, expr.name, own, {"power_sampled": False, "reason": reason})
        return
    run_spec(executor, spec_in_scope(expr.name, call, scope))


def _as_sglang(executor: Any, name: str | None, own: Callable[[], None], note: dict[str, Any]) -> None:
    """SGLang's own call (``own()``), its meta info noted ``presto: note`` before a reader waiting
    on its variable sees it (the call's events are held back until then)."""
    if name is None:
        own()
        return
    tables = [t for t in (executor.variable_event, executor.stream_var_event or {}) if name in t]
    events = [t[name] for t in tables]
    for t in tables:
        t[name] = threading.Event()  # what SGLang's own call sets in their place
    try:
        own()
        executor.meta_info[name] = {**(executor.meta_info.get(name) or {}), "presto": note}
    finally:
        for t, event in zip(tables, events):
            t[name] = event
            event.set()
