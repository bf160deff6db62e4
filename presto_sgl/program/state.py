"""What ``power_gen`` reads from and writes to an SGLang program state: the exact token ids
its text stands for (:class:`TokenTrace`), the prompt ids of its text, and the answer
recorded as ``sgl.gen`` records one (text appended, variable, meta info, event set)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..engines.text import cut_at_stop, ids_of_prefix

if TYPE_CHECKING:
    from ..execution.choices import ChoiceDraw
    from ..methods import Method, SampleResult
    from .spec import ChoiceSpec, GenSpec

TRACE_VAR = "_presto_token_ids"
"""The program variable that holds a state's :class:`TokenTrace` (copied into forks)."""


@dataclass(frozen=True)
class TokenTrace:
    """The exact token ids ``ids`` that the program text ``text`` stands for."""

    text: str
    ids: tuple[int, ...]


def prompt_ids(variables: dict[str, Any], text: str, engine: Any) -> tuple[tuple[int, ...], str]:
    """The prompt ids of ``text`` and their source: exact ids from an earlier power_gen, or tokenized text."""
    trace = variables.get(TRACE_VAR)
    if isinstance(trace, TokenTrace) and text.startswith(trace.text):
        rest = text[len(trace.text) :]
        return (trace.ids + tuple(engine.text.encode(rest)), "ids+text") if rest else (trace.ids, "ids")
    # As SGLang's tokenizer manager encodes a text request (special tokens such as BOS added).
    return tuple(engine.text.encode(text, special=True)), "text"


def record(
    executor: Any,
    spec: GenSpec,
    eng: Any,
    chain: Method,
    text: str,
    ids: tuple[int, ...],
    source: str,
    result: SampleResult,
    run: dict[str, Any],
) -> None:
    """The answer into the program: text, variable, meta info (``run``'s fields too: the keys,
    ``e2e_latency``), exact ids; as ``sgl.gen`` does."""
    tokens = result.state.tokens
    capped = tokens[: spec.max_tokens] if spec.max_tokens is not None else tokens
    kept, stop_index = cut_at_stop(capped, (*eng.text.stop_ids, *spec.stop_token_ids))
    answer = eng.text.decode(kept)
    finish: dict[str, Any] = (
        {"type": "stop", "matched": capped[stop_index]}
        if stop_index is not None
        else {"type": "length", "length": len(capped)}
    )
    hits = [(answer.find(s), s) for s in spec.stop if s in answer]
    hits += [(m.start(), p) for p in spec.stop_regex if (m := re.search(p, answer)) is not None]
    if hits:
        at, matched = min(hits)
        answer, finish = answer[:at], {"type": "stop", "matched": matched}
        kept, kept_text = ids_of_prefix(eng.text, kept, answer)
    else:
        kept_text = answer
    logp = result.state.logp
    meta: dict[str, Any] = {
        **asdict(result.metrics),
        "prompt_ids": list(ids),
        "prompt_source": source,
        "output_ids": list(tokens),
        "answer_ids": list(kept),
        "output_token_logq": list(result.state.logq),
        "output_token_logp": list(logp),
        "log_p0": result.state.log_likelihood(),
        "eos_index": cut_at_stop(tokens, eng.text.stop_ids)[1],
        "finish_reason": finish,
        "prompt_tokens": len(ids),
        "completion_tokens": len(kept),
        **run,
        "config": chain.describe(),
    }
    if spec.return_logprob:
        meta["output_token_logprobs"] = [[logp[i], t, None] for i, t in enumerate(kept)]
        meta["output_token_logprobs_length"] = len(kept)
    _commit(executor, spec.name, answer, meta, TokenTrace(text + kept_text, ids + tuple(kept)))


def _commit(executor: Any, name: str | None, answer: str, meta: dict[str, Any], trace: TokenTrace) -> None:
    """``answer`` appended to the program's text, its variable and meta info set, the state's
    exact ids kept and the variable's events set (a streamed program gets the answer whole)."""
    executor.text_ += answer
    executor.variables[name] = answer
    executor.meta_info[name] = meta
    executor.variables[TRACE_VAR] = trace
    for events in (executor.variable_event, executor.stream_var_event or {}):
        if name in events:
            events[name].set()


def record_choice(
    executor: Any,
    spec: ChoiceSpec,
    text: str,
    ids: tuple[int, ...],
    source: str,
    options: list[tuple[int, ...]],
    drawn: ChoiceDraw,
    seed: int,
    chain_id: int,
) -> None:
    """The drawn choice into the program, as ``sgl.select`` records one (text, variable, meta info)."""
    choice = spec.choices[drawn.index]
    meta = {
        "choices": list(spec.choices),
        "index": drawn.index,
        "choice_logp": list(drawn.logp),
        "choice_probs": list(drawn.probs),
        "alpha": spec.alpha,
        "prompt_ids": list(ids),
        "prompt_source": source,
        "answer_ids": list(options[drawn.index]),
        "seed": seed,
        "chain_id": chain_id,
    }
    _commit(executor, spec.name, choice, meta, TokenTrace(text + choice, ids + options[drawn.index]))
