"""``power_gen``: exact power sampling as a step of SGLang frontend programs.

Inside an ``@sgl.function`` body, ``power_gen(s, "answer", ...)`` samples a response y
of exactly ``max_new_tokens`` tokens (no EOS stop) approximately from

    pi_alpha(y | x) ∝ p0(y | x)^alpha,      x = the program's text so far,

with PowerMH (``rule="sequential"``) or PreSTO-PowerMH (``rule="step"``, default; or
``"bfs"``, ``"predictive"``), through the token-level :class:`SGLangEngine` against the
program's backend (its ``RuntimeEndpoint`` URL). The decoded response, up to its first
stop token (an EOS id of the tokenizer or of the model's generation config; ``eos_index``
in the meta info), is appended to the program text and stored in ``s[name]``;
``s.get_meta_info(name)`` holds the chain's metrics (the ``PromptMetrics`` fields),
its exact ids (``prompt_ids``, ``output_ids``), per-token log q_tau and log p0 and
``log_p0`` = sum_t log p0(y_t | x, y_<t).

Token ids, never a text round trip: SGLang's frontend is text-only, and re-encoding
decoded text can change the ids. The prompt is the program text tokenized once, as
the server tokenizes text. A power_gen leaves the exact ids of the state's text
(prompt ids + the response ids kept in the text) on the state; a later power_gen on
that state or on its forks starts from those ids and tokenizes only text appended
since (``meta["prompt_source"]``: ``"text"``, ``"ids"`` or ``"ids+text"``).

Several chains: ``power_gen(s.fork(n), name, ...)`` runs one chain per fork
concurrently (the server batches their requests), chain i keyed by (seed,
chain_id + i): independent chains whose requests share the prompt prefix in the
server's radix cache.

The keyword arguments are the registry's (:func:`presto_sgl.config.parameters`):
``method`` (an MH kernel, or a baseline), ``rule``, the schedule, ``budget`` and every
method's own parameters, so a registered kernel is a ``power_gen`` option with no other
edit; ``inspect.signature(power_gen)`` lists them.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .config import parameters
from .engines.sglang.http import SGLangEngine
from .errors import ConfigError
from .methods import Method, SampleResult
from .options import MethodConfig, make_method
from .options import method_config as _method_config
from .runner import run_prompts

if TYPE_CHECKING:
    from sglang.lang.interpreter import ProgramState, ProgramStateGroup

TRACE_VAR = "_presto_token_ids"
"""The program variable that holds a state's :class:`TokenTrace` (copied into forks)."""


@dataclass(frozen=True)
class TokenTrace:
    """The exact token ids ``ids`` that the program text ``text`` stands for."""

    text: str
    ids: tuple[int, ...]


_engines: dict[str, SGLangEngine] = {}
_engines_lock = threading.Lock()


class PowerGen:
    """``power_gen(s, name, *, seed=0, chain_id=0, engine=None, **options)``: run a power-sampling
    chain on the program state ``s`` (or one per fork) and store it as ``name``.

    ``options`` are the registry's parameters (``method``, ``rule``, ``max_new_tokens``,
    ``block_size``, ``steps``, ``alpha``, ``tau``, ``budget``, the kernels' own such as ``beta``,
    ``tries`` and ``try_temperatures``; see ``inspect.signature(power_gen)``); the library's
    defaults fill the rest. ``engine`` replaces the engine built from the program's backend.
    """

    @property
    def __signature__(self) -> inspect.Signature:
        kw = inspect.Parameter.KEYWORD_ONLY
        head = [inspect.Parameter("s", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter("name", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
                inspect.Parameter("seed", kw, default=0, annotation=int),
                inspect.Parameter("chain_id", kw, default=0, annotation=int),
                inspect.Parameter("engine", kw, default=None)]
        opts = [inspect.Parameter(p.name, kw, default=p.default) for p in parameters()
                if p.name not in ("predictor", "online")]
        return inspect.Signature([*head, *opts], return_annotation=None)

    def __call__(self, s: ProgramState | ProgramStateGroup | Sequence[ProgramState], name: str, *, seed: int = 0,
                 chain_id: int = 0, engine: SGLangEngine | None = None, **options: Any) -> None:
        states = _program_states(s)
        if not isinstance(name, str) or not name:
            raise ConfigError("name", name, f"{{name}} (={name!r}) must be a non-empty string: the variable that "
                              "receives the response")
        if isinstance(chain_id, bool) or not isinstance(chain_id, int):
            raise ConfigError("chain_id", chain_id, f"{{chain_id}} (={chain_id!r}) must be an integer (fork i runs "
                              "chain chain_id + i)")
        spec = method_config(options)
        eng = engine if engine is not None else _engine_for(states[0].stream_executor.backend)
        chain = make_method(eng, spec)

        texts = [st.text() for st in states]  # waits for the expressions submitted before
        prompts = [_prompt_ids(st, text, eng) for st, text in zip(states, texts, strict=True)]
        for i, (ids, _) in enumerate(prompts):
            _check_prompt(chain, ids, name, i if len(states) > 1 else None)

        def run_one(prompt: Sequence[int], *, seed: int, prompt_id: int) -> SampleResult:
            return chain.run(prompt, seed=seed, prompt_id=chain_id + prompt_id)

        results = run_prompts(run_one, [ids for ids, _ in prompts], seed=seed, workers=len(states))
        for i, (st, text, (ids, source), result) in enumerate(zip(states, texts, prompts, results, strict=True)):
            tokens = result.state.tokens
            answer = eng.text.answer(tokens)  # the answer ends at the model's first stop token
            meta: dict[str, Any] = {
                **asdict(result.metrics),
                "prompt_ids": list(ids),
                "prompt_source": source,
                "output_ids": list(tokens),
                "output_token_logq": list(result.state.logq),
                "output_token_logp": list(result.state.logp),
                "log_p0": result.state.log_likelihood(),
                "eos_index": answer.eos_index,
                "seed": seed,
                "chain_id": chain_id + i,
                "config": chain.describe(),
            }
            executor = st.stream_executor
            executor.variables[name] = answer.text
            executor.meta_info[name] = meta
            executor.variables[TRACE_VAR] = TokenTrace(text + answer.text, ids + answer.ids)
            st += answer.text


power_gen = PowerGen()


def method_config(options: dict[str, Any]) -> MethodConfig:
    """The validated method of ``power_gen``'s ``options`` (a ConfigError naming the argument)."""
    server_side = {"predictor", "online"} & set(options)
    if server_side:
        name = sorted(server_side)[0]
        raise ConfigError(name, options[name], f"{{{name}}} is not a power_gen argument (the predictor is the "
                          "package's default); use the library's Sampler for it")
    if isinstance(options.get("try_temperatures"), list):
        options["try_temperatures"] = tuple(options["try_temperatures"])
    return _method_config(options)


def _program_states(s: Any) -> list[ProgramState]:
    try:
        from sglang.lang.interpreter import ProgramState, ProgramStateGroup
    except ImportError as exc:
        raise ImportError(
            f"power_gen needs sglang's frontend ({exc}); run from .venv-sglang (`bash scripts/install_sglang.sh`)"
        ) from exc
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


def _check_prompt(method: Method, ids: Sequence[int], name: str, fork: int | None) -> None:
    """``method.check_prompt`` on the program text's ids; its ValueError says which power_gen and program text."""
    try:
        method.check_prompt(ids)
    except ValueError as exc:
        where = f"power_gen({name!r})" + (f" on fork {fork}" if fork is not None else "")
        hint = "; add text first (e.g. s += sgl.user(...))" if not ids else ""
        raise ValueError(
            f"{where}: its prompt is the program text before it ({len(ids)} tokens) and cannot be sampled from: {exc}{hint}"
        ) from exc


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


def _prompt_ids(state: ProgramState, text: str, engine: SGLangEngine) -> tuple[tuple[int, ...], str]:
    """The prompt ids of ``text`` and their source: exact ids from an earlier power_gen, or tokenized text."""
    trace = state.stream_executor.variables.get(TRACE_VAR)
    if isinstance(trace, TokenTrace) and text.startswith(trace.text):
        rest = text[len(trace.text) :]
        return (trace.ids + tuple(engine.text.encode(rest)), "ids+text") if rest else (trace.ids, "ids")
    # As SGLang's tokenizer manager encodes a text request (special tokens such as BOS added).
    return tuple(engine.text.encode(text, special=True)), "text"
