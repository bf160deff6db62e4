"""reasoning-gym tasks (PyPI ``reasoning-gym``): procedurally generated, graded by the task's own
``score_answer``.

``reasoning-gym:TASK`` makes ``limit`` problems of TASK from the run seed (the same seed gives
the same problems); ``reasoning-gym:TASK:KEY=VALUE,...`` sets fields of the task's config
(e.g. ``basic_arithmetic:max_terms=2,max_digits=1``; values as Python literals, else strings).
Prompt: the question and an instruction to put the final answer in ``<answer>`` tags.
Extraction: :func:`~presto_sgl.tasks.extract.final_answer` (tags, then ``\\boxed{}``, then an
``Answer:`` line); for a task whose reference answers are numbers, a response that states none
of these is read by its last number. Correct = score 1; the score (partial credit some tasks
give) is kept too.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from .base import Grade, Problem
from .extract import final_answer, last_number

SUGGESTED = ("basic_arithmetic", "chain_sum", "gsm_symbolic", "leg_counting", "products")
INSTRUCTION = "{question}\n\nThink briefly, then give only the final answer inside <answer></answer> tags."


class ReasoningGym:
    errors: tuple[str, ...] = ()  # every input is a problem
    grader = (
        "reasoning-gym's score_answer on the extracted answer (<answer> tags, \\boxed{}, Answer: line; "
        "numeric tasks: else the last number)"
    )

    def __init__(self, spec: str, size: int, seed: int) -> None:
        task, _, options = spec.partition(":")
        try:
            import reasoning_gym
        except ImportError:
            raise ImportError("reasoning-gym tasks need the reasoning-gym package: pip install -e '.[eval]'") from None
        if task not in reasoning_gym.factory.DATASETS:
            known = ", ".join(SUGGESTED)
            raise ValueError(
                f"--dataset reasoning-gym:{task}: unknown reasoning-gym task (try one of {known}; "
                f"all: {len(reasoning_gym.factory.DATASETS)} in reasoning_gym.factory.DATASETS)"
            )
        self.name = f"reasoning-gym:{spec}"
        try:
            self._data = reasoning_gym.create_dataset(task, size=size, seed=seed, **_options(task, options))
        except (AssertionError, TypeError) as exc:  # reasoning-gym validates its configs with asserts
            raise ValueError(
                f"--dataset reasoning-gym:{spec}: the task's config refused it ({exc or 'invalid value'})"
            ) from None
        self._numeric = all(last_number(str(e["answer"])) == str(e["answer"]).strip() for e in self._data)

    def problems(self) -> list[Problem]:
        return [
            Problem(
                id=str(i),
                prompt=INSTRUCTION.format(question=e["question"]),
                chat=True,
                reference=e["answer"],
                meta={"entry": i},
            )
            for i, e in enumerate(self._data)
        ]

    def grade(self, problem: Problem, response: str) -> Grade:
        answer = final_answer(response)
        if answer is None and self._numeric:
            answer = last_number(response)
        score = float(self._data.score_answer(answer=answer, entry=self._data[problem.meta["entry"]]))
        return Grade(correct=score >= 1.0, answer=answer, score=score)


def _options(task: str, text: str) -> dict[str, Any]:
    """``KEY=VALUE,...`` (parsed as a call's keyword arguments) for the task's config; a value
    that is not a Python literal is taken as a string. ValueError naming a bad item."""
    if not text:
        return {}
    from reasoning_gym.factory import DATASETS

    fields = {f.name for f in dataclasses.fields(DATASETS[task][1])} - {"seed", "size"}
    bad = ValueError(
        f"--dataset reasoning-gym:{task}:{text}: expected comma-separated KEY=VALUE with KEY one of "
        f"{', '.join(sorted(fields))}"
    )
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        raise bad from None
    if not isinstance(call, ast.Call) or call.args or any(k.arg not in fields for k in call.keywords):
        raise bad
    out: dict[str, Any] = {}
    for k in call.keywords:
        try:
            out[k.arg] = ast.literal_eval(k.value)  # type: ignore[index]  # k.arg is None only for **kwargs, refused by the fields check above
        except ValueError:
            out[k.arg] = ast.get_source_segment(f"f({text})", k.value)  # type: ignore[index]  # k.arg is None only for **kwargs, refused above
    return out
