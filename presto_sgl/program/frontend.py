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
default 16) and its response is cut back to ``max_tokens``; under such a cap the default ending
is ``"eos"`` (the responses that end at the model's stop token: a short answer stops paying for
the cap on every MH step; ``ending="fixed"`` gives the paper's fixed length, and an engine
whose model has no stop token falls back to it). ``max_new_tokens`` instead sets T exactly
(the fixed target unless ``ending`` says otherwise).
The answer ends at the model's first stop token (an EOS id of the tokenizer or of the
generation config), at any of ``stop_token_ids``, and before the first of the ``stop``
strings, whichever comes first (``finish_reason`` in the meta info says which).
``return_logprob=True`` adds ``output_token_logprobs`` in SGLang's shape, ``[log p0, id, None]``
per answer token. Left unset, ``max_tokens``, ``stop``, ``stop_token_ids`` and ``return_logprob``
take the program's run-level values as ``sgl.gen``'s do (``program.run(max_new_tokens=128,
stop=...)``; :data:`~presto_sgl.program.spec.RUN_DEFAULTS`). ``name`` may be omitted, as for ``sgl.gen`` (the answer is
appended to the text). ``temperature`` t > 0 sets alpha = 1/t, as ``serve`` reads it (0, greedy,
keeps alpha). ``choices=[...]`` (or :func:`power_select`, ``sgl.select``'s drop-in) draws one
choice c from p0(c | x)^alpha exactly, from one scoring pass. ``regex``, ``json_schema``,
``dtype`` and ``min_tokens`` (``min_new_tokens``) restrict the chain's target to the answers
they allow, sampled exactly (structured power sampling, docs/design.md §2.2; ``ending`` is then
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

import functools
import inspect
from collections.abc import Sequence
from typing import Any

from ..config import SERVER_SIDE, parameters
from ..constraints import GRAMMARS
from .scope import install
from .spec import ChoiceSpec, GenSpec, spec_of


class PowerGen:
    """``power_gen(name, *, max_tokens=None, stop=None, stop_token_ids=None, return_logprob=False,
    temperature=None, choices=None, regex=None, json_schema=None, ebnf=None, dtype=None, min_tokens=None,
    stop_regex=None, seed=None, chain_id=None, engine=None, **options)``: a program expression
    (``s += ...``).

    ``options`` are the registry's parameters (``method``, ``rule``, ``max_new_tokens``,
    ``block_size``, ``steps``, ``alpha``, ``tau``, ``ending`` ("eos": the chain's responses end at
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
            *(inspect.Parameter(g.name, kw, default=None, annotation=g.annotation | None) for g in GRAMMARS.values()),
            inspect.Parameter("dtype", kw, default=None, annotation=type | str | None),
            inspect.Parameter("min_tokens", kw, default=None, annotation=int | None),
            inspect.Parameter("stop_regex", kw, default=None, annotation=str | list[str] | None),
            inspect.Parameter("seed", kw, default=None, annotation=int | None),
            inspect.Parameter("chain_id", kw, default=None, annotation=int | None),
            inspect.Parameter("engine", kw, default=None),
        ]
        opts = [inspect.Parameter(p.name, kw, default=p.default) for p in parameters() if p.name not in SERVER_SIDE]
        return inspect.Signature([*head, *opts])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(type(v).__name__ == "SglArgument" for v in (*args, *kwargs.values())):
            # SGLang traces a program with placeholder arguments (run_batch's prefix caching): it
            # reads only the expression's name, so validate nothing then
            return _expression_class()(args[0] if args else kwargs.get("name"), None)
        return expression(*args, **kwargs)


power_gen = PowerGen()


def expression(*args: Any, **kwargs: Any) -> Any:
    """The ``SglGen`` of a power_gen call for ``s += ...``, validated now (installs the interpreter hooks)."""
    spec = spec_of(*args, **kwargs)
    cls = _expression_class()
    install()
    return cls(spec.name, spec)


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


def power_gen_int(name: str | None = None, **kwargs: Any) -> Any:
    """``sgl.gen_int``'s drop-in: ``power_gen(name, dtype=int, ...)``, an integer answer (SGLang's
    regex for int) power-sampled exactly under that constraint."""
    return power_gen(name, dtype=int, **kwargs)


def power_gen_string(name: str | None = None, **kwargs: Any) -> Any:
    """``sgl.gen_string``'s drop-in: ``power_gen(name, dtype=str, ...)``, a quoted string answer
    (SGLang's regex for str) power-sampled exactly under that constraint."""
    return power_gen(name, dtype=str, **kwargs)


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

        def __init__(self, name: str, spec: GenSpec | ChoiceSpec | None) -> None:
            SglExpr.__init__(self)
            self.name, self.spec = name, spec

        @property
        def sampling_params(self) -> Any:  # only SGLang's own gen path reads it: the hook did not run
            raise RuntimeError(
                "a power_gen expression reached SGLang's sgl.gen path: presto-sgl's interpreter "
                "hook is not installed (import power_gen from presto_sgl.program)"
            )

        def __repr__(self) -> str:
            return f"PowerGen({self.name!r})"

    return PowerGenExpr
