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
    from ..methods import SampleResult
    from .spec import ChoiceSpec, GenSpec

TRACE_VAR = "_presto_token_ids"
"""The program variable that holds a state's :class:`TokenTrace` (copied into forks)."""


@dataclass(frozen=True)
class TokenTrace:
    """The exact token ids ``ids`` that the program text ``text`` stands for."""

    text: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Prompt:
    """The program text before a call and the ids it stands for: exact ids from an earlier
    power_gen (``source`` "ids", or "ids+text" with the text after them tokenized), or the
    tokenized text ("text")."""

    text: str
    ids: tuple[int, ...]
    source: str


def prompt_of(variables: dict[str, Any], text: str, engine: Any) -> Prompt:
    """The :class:`Prompt` of the program text ``text``."""
    trace = variables.get(TRACE_VAR)
    if isinstance(trace, TokenTrace) and text.startswith(trace.text):
        rest = text[len(trace.text) :]
        return (
            Prompt(text, trace.ids + tuple(engine.text.encode(rest)), "ids+text")
            if rest
            else Prompt(text, trace.ids, "ids")
        )
    # As SGLang's tokenizer manager encodes a text request (special tokens such as BOS added).
    return Prompt(text, tuple(engine.text.encode(text, special=True)), "text")


def record(executor: Any, spec: GenSpec, eng: Any, prompt: Prompt, result: SampleResult, run: dict[str, Any]) -> None:
    """The answer into the program: text, variable, meta info (``run``'s fields too: the keys,
    ``e2e_latency``, the chain's ``config``), exact ids; as ``sgl.gen`` does."""
    tokens = result.state.tokens
    answer, kept, kept_text, finish = _answer(spec, eng, tokens)
    logp = result.state.logp
    meta: dict[str, Any] = {
        **asdict(result.metrics),
        "prompt_ids": list(prompt.ids),
        "prompt_source": prompt.source,
        "output_ids": list(tokens),
        "answer_ids": list(kept),
        "output_token_logq": list(result.state.logq),
        "output_token_logp": list(logp),
        "log_p0": result.state.log_likelihood(),
        "eos_index": cut_at_stop(tokens, eng.text.stop_ids)[1],
        "finish_reason": finish,
        "prompt_tokens": len(prompt.ids),
        "completion_tokens": len(kept),
        **run,
    }
    if spec.return_logprob:
        meta["output_token_logprobs"] = [[logp[i], t, None] for i, t in enumerate(kept)]
        meta["output_token_logprobs_length"] = len(kept)
    _commit(executor, spec.name, answer, meta, TokenTrace(prompt.text + kept_text, prompt.ids + tuple(kept)))


def _answer(spec: GenSpec, eng: Any, tokens: tuple[int, ...]) -> tuple[str, tuple[int, ...], str, dict[str, Any]]:
    """The answer of a chain's response ``tokens``: capped at ``max_tokens``, cut at the first
    stop token, stop string or stop regex. (answer text, its exact ids, the text those ids
    decode to, the finish reason)."""
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
    if not hits:
        return answer, tuple(kept), answer, finish
    at, matched = min(hits)
    answer = answer[:at]
    kept, kept_text = ids_of_prefix(eng.text, kept, answer)
    return answer, tuple(kept), kept_text, {"type": "stop", "matched": matched}


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
    prompt: Prompt,
    options: list[tuple[int, ...]],
    drawn: ChoiceDraw,
    run: dict[str, Any],
) -> None:
    """The drawn choice into the program, as ``sgl.select`` records one (text, variable, meta
    info, with ``run``'s fields: the keys)."""
    choice = spec.choices[drawn.index]
    meta = {
        "choices": list(spec.choices),
        "index": drawn.index,
        "choice_logp": list(drawn.logp),
        "choice_probs": list(drawn.probs),
        "alpha": spec.alpha,
        "prompt_ids": list(prompt.ids),
        "prompt_source": prompt.source,
        "answer_ids": list(options[drawn.index]),
        **run,
    }
    _commit(executor, spec.name, choice, meta, TokenTrace(prompt.text + choice, prompt.ids + options[drawn.index]))
