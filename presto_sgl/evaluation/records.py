"""One JSON record per prompt of a run: the response, the paper's statistics, the grade, metrics.

``log_p0`` is the chain's own log p0 of the whole fixed-length response; the statistics
(Eq. 21-22, :func:`~presto_sgl.evaluation.rescore.statistics`) use the rescoring forward
when there is one (``rescored_log_p0`` then lets a reader check the two agree, the paper's
rescoring check), else the chain's log p0 and entropies. ``response_text`` ends at the
first stop token; the grade is of that text. ``answer_log_likelihood`` and
``answer_confidence`` are the same statistics over the answer: the tokens up to and including
the first stop token (all of them without one), which is what the EOS-terminated target
samples, so runs of both targets compare on them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..engines.base import Engine
from ..methods import SampleResult
from ..tasks.base import Problem, Task
from .rescore import Rescorer, statistics


def make_record(
    problem: Problem,
    task: Task,
    engine: Engine,
    result: SampleResult,
    *,
    seed: int,
    rescorer: Rescorer | None,
    seconds: float,
) -> dict[str, Any]:
    state = result.state
    answer = engine.text.answer(state.tokens)
    text, eos_index = answer.text, answer.eos_index
    if rescorer is not None:
        scores = rescorer.score(state.prompt, state.tokens)
        logp, entropy = scores.logp, scores.entropy if scores.entropy is not None else state.entropy
        rescored: float | None = sum(scores.logp)
    else:
        logp, entropy, rescored = state.logp, state.entropy, None
    stats = statistics(logp, entropy)
    n = len(logp) if eos_index is None else eos_index + 1
    answer_stats = statistics(logp[:n], None if entropy is None else entropy[:n])
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
        **{f"answer_{k}": v for k, v in answer_stats.items()},
        "grade": {"correct": grade.correct, "score": grade.score, "answer": grade.answer, "detail": grade.detail},
        "metrics": asdict(result.metrics),
        "seed": seed,
        "wall_s": seconds,
    }
