"""Running a ``power_gen`` call in a program: its engine (one per server URL), the shared
scheduler of the chains that run at once, its keys from its place in the program, the chain or
the choice drawn on the program text's ids, and the answer recorded (:mod:`.state`).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from ..build import ending_default, make_method
from ..chain.keys import SEED_MASK, hash64
from ..config import MethodConfig, PowerConfig
from ..engines.scoring import scorer
from ..engines.sglang.http import SGLangEngine
from ..execution.choices import draw_choice
from ..execution.context import RunContext
from ..methods import Method
from ..scheduling.scheduler import Scheduler
from . import interpreter
from .spec import ChoiceSpec, GenSpec, with_run_defaults
from .state import prompt_of, record, record_choice

_engines: dict[str, SGLangEngine] = {}
_engines_lock = threading.Lock()
_schedulers: weakref.WeakKeyDictionary[Any, Scheduler] = weakref.WeakKeyDictionary()


def run_expression(executor: Any, expr: Any) -> None:
    """What the interpreter hook runs for a power_gen expression (on the program's thread)."""
    run_spec(executor, expr.spec)


def run_spec(executor: Any, spec: GenSpec | ChoiceSpec) -> None:
    """A call's chain or choice on ``executor``'s text, with the program's run-level defaults
    where the call left them unset, its answer recorded."""
    if isinstance(spec, ChoiceSpec):
        _run_choice(executor, spec)
    else:
        _run(executor, with_run_defaults(spec, executor.default_sampling_para))


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
    prompt = prompt_of(executor.variables, executor.text_, eng)
    if not prompt.ids:
        raise ValueError(f"power_gen {spec.name!r}: the program text before it is empty; choices need a prompt")
    seed, chain_id = _keys(executor, spec)
    options = [tuple(eng.text.encode(c)) for c in spec.choices]
    drawn = draw_choice(scorer(eng), prompt.ids, options, spec.alpha, seed=seed, prompt_id=chain_id)
    record_choice(executor, spec, prompt, options, drawn, {"seed": seed, "chain_id": chain_id})


def _run(executor: Any, spec: GenSpec) -> None:
    """Run ``spec``'s chain on ``executor``'s text (on its thread, or with the executor idle) and
    record the answer."""
    eng = spec.engine if spec.engine is not None else _engine_for(executor.backend)
    chain = make_method(eng, on_engine(spec, eng))
    prompt = prompt_of(executor.variables, executor.text_, eng)
    _check_prompt(chain, prompt.ids, spec.name)
    seed, chain_id = _keys(executor, spec)
    scheduler = _scheduler_for(eng)
    scheduler.adopt(chain)
    start = time.perf_counter()
    with scheduler.chain() as lane:
        result = chain.run(prompt.ids, seed=seed, prompt_id=chain_id, context=RunContext(lane=lane))
    run = {"e2e_latency": time.perf_counter() - start, "seed": seed, "chain_id": chain_id, "config": chain.describe()}
    record(executor, spec, eng, prompt, result, run)


def on_engine(spec: GenSpec, eng: Any) -> MethodConfig:
    """``spec``'s method on ``eng``: the default EOS-terminated target where ``eng`` can end
    there, else the fixed one (:func:`~presto_sgl.build.ending_default`); a constrained target
    stays EOS-terminated (an engine that cannot end there is refused when the chain is built)."""
    m = spec.method
    if not spec.default_eos or (isinstance(m.config, PowerConfig) and m.config.target.constraint is not None):
        return m
    assert isinstance(m.config, PowerConfig)  # a kernel's: default_eos is never set for a baseline
    fixed = dataclasses.replace(m.config, target=dataclasses.replace(m.config.target, ending="fixed"))
    config = ending_default(fixed, eng)
    return m if config == m.config else dataclasses.replace(m, config=config)


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
