"""One JSON record per prompt of a run: the response, the paper's statistics, the grade, metrics.

``log_p0`` is the chain's own log p0 of the whole fixed-length response; the statistics
(Eq. 21-22, :func:`~presto_sgl.evaluation.rescore.statistics`) use the rescoring forward
when there is one (``rescored_log_p0`` then lets a reader check the two agree, the paper's
rescoring check), else the chain's log p0 and entropies. ``response_text`` ends at the
first stop token; the grade is of that text.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..engines.text import cut_at_stop
from ..samplers import SampleResult
from ..tasks.base import Problem, Task
from .rescore import Rescorer, statistics


def response_text(engine: Any, tokens: tuple[int, ...]) -> tuple[str, int | None]:
    kept, eos_index = cut_at_stop(tokens, getattr(engine, "stop_token_ids", None))
    decode = getattr(engine, "decode", None)
    return (decode(list(kept)) if decode is not None else " ".join(map(str, kept))), eos_index


def make_record(problem: Problem, task: Task, engine: Any, result: SampleResult, *, seed: int,
                rescorer: Rescorer | None, seconds: float) -> dict[str, Any]:
    state = result.state
    text, eos_index = response_text(engine, state.tokens)
    if rescorer is not None:
        scores = rescorer.score(state.prompt, state.tokens)
        stats = statistics(scores.logp, scores.entropy)
        rescored: float | None = sum(scores.logp)
    else:
        stats, rescored = statistics(state.logp, state.entropy), None
    grade = task.grade(problem, text)
    return {
        "id": problem.id,
        "prompt": problem.prompt,
        "prompt_ids": list(state.prompt),
        "response_ids": list(state.tokens),
        "response_text": text,
        "eos_index": eos_index,
        "log_p0": state.log_likelihood(),
        "rescored_log_p0": rescored,
        **stats,
        "grade": {"correct": grade.correct, "score": grade.score, "answer": grade.answer, "detail": grade.detail},
        "metrics": asdict(result.metrics),
        "seed": seed,
        "wall_s": seconds,
    }
