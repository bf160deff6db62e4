"""reasoning-gym tasks (PyPI ``reasoning-gym``): procedurally generated, graded by the task's own
``score_answer``.

``reasoning-gym:TASK`` makes ``limit`` problems of TASK from the run seed (the same seed gives
the same problems). Prompt: the question and an instruction to put the final answer in
``<answer>`` tags. Extraction: :func:`~presto_sgl.tasks.extract.final_answer` (tags, then
``\\boxed{}``, then an ``Answer:`` line). Correct = score 1; the score (partial credit some
tasks give) is kept too.
"""

from __future__ import annotations

from .base import Grade, Problem
from .extract import final_answer

SUGGESTED = ("basic_arithmetic", "chain_sum", "gsm_symbolic", "leg_counting", "products")
INSTRUCTION = "{question}\n\nThink briefly, then give only the final answer inside <answer></answer> tags."


class ReasoningGym:
    grader = "reasoning-gym's score_answer on the extracted answer (<answer> tags, \\boxed{}, Answer: line)"

    def __init__(self, task: str, size: int, seed: int) -> None:
        try:
            import reasoning_gym
        except ImportError:
            raise ImportError("reasoning-gym tasks need the reasoning-gym package: pip install -e '.[eval]'") from None
        if task not in reasoning_gym.factory.DATASETS:
            known = ", ".join(SUGGESTED)
            raise ValueError(f"--dataset reasoning-gym:{task}: unknown reasoning-gym task (try one of {known}; "
                             f"all: {len(reasoning_gym.factory.DATASETS)} in reasoning_gym.factory.DATASETS)")
        self.name = f"reasoning-gym:{task}"
        self._data = reasoning_gym.create_dataset(task, size=size, seed=seed)

    def problems(self) -> list[Problem]:
        return [Problem(id=str(i), prompt=INSTRUCTION.format(question=e["question"]), chat=True, reference=e["answer"],
                        meta={"entry": i}) for i, e in enumerate(self._data)]

    def grade(self, problem: Problem, response: str) -> Grade:
        answer = final_answer(response)
        score = float(self._data.score_answer(answer=answer, entry=self._data[problem.meta["entry"]]))
        return Grade(correct=score >= 1.0, answer=answer, score=score)
