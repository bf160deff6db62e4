"""Tasks by name (``presto-sgl run --dataset``): ``addition``, ``arithmetic[:DIGITS[:TERMS]]`` and
``sequence`` (few-shot, for base models), ``humaneval`` (``humaneval:completion``: the bare prompt, for base models),
``reasoning-gym:TASK``, ``champ``, ``hf:NAME[:CONFIG][:SPLIT]`` (a Hugging Face dataset,
:mod:`.hf`), or a path to a JSONL file of prompts.

Problems are fixed by the name, the seed (procedural tasks) and the limit: the first
``limit`` problems in the dataset's order.
"""

from __future__ import annotations

from pathlib import Path

from .base import Grade, Problem, Task

NAMES = (
    "addition",
    "arithmetic[:DIGITS[:TERMS]]",
    "sequence",
    "humaneval[:completion]",
    "reasoning-gym:TASK",
    "champ",
    "hf:NAME[:CONFIG][:SPLIT]",
    "FILE.jsonl",
)


class Addition:
    """Multi-digit addition, the tiny model's task (:mod:`presto_sgl.tasks.addition`); no chat template."""

    name = "addition"
    errors: tuple[str, ...] = ()  # every input is a problem
    grader = "the integer after 'A:' equals a + b"

    def __init__(self, size: int, seed: int) -> None:
        from .addition import make_problems

        self._problems = make_problems(size, seed)

    def problems(self) -> list[Problem]:
        return [
            Problem(id=str(i), prompt=p.prompt, chat=False, reference=p.answer) for i, p in enumerate(self._problems)
        ]

    def grade(self, problem: Problem, response: str) -> Grade:
        from .addition import extract_answer

        got = extract_answer(response)
        return Grade(correct=got == problem.reference, answer=None if got is None else str(got))


def load_task(
    name: str,
    *,
    limit: int | None = None,
    seed: int = 0,
    prompt_field: str | None = None,
    answer_field: str | None = None,
) -> tuple[Task, list[Problem]]:
    """The task called ``name`` and its first ``limit`` problems (all when None); ``prompt_field`` /
    ``answer_field`` name the columns of a Hugging Face dataset or the keys of a JSONL file."""
    if (prompt_field or answer_field) and not (
        name.startswith("hf:") or name.endswith(".jsonl") or Path(name).is_file()
    ):
        raise ValueError("--prompt-field / --answer-field apply to hf:... datasets and JSONL files")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"--limit (={limit!r}) must be a whole number >= 1")
    size = limit if limit is not None else 100
    task: Task
    if name == "addition":
        task = Addition(size, seed)
    elif name == "arithmetic" or name.startswith("arithmetic:"):
        from .fewshot import Arithmetic

        task = Arithmetic(name.partition(":")[2], size, seed)
    elif name == "sequence":
        from .fewshot import Sequence

        task = Sequence(size, seed)
    elif name in ("humaneval", "humaneval:completion"):
        from .humaneval import HumanEval

        task = HumanEval(completion=name.endswith(":completion"))
    elif name.startswith("reasoning-gym:"):
        from .gym import ReasoningGym

        task = ReasoningGym(name.partition(":")[2], size, seed)
    elif name.startswith("hf:"):
        from .hf import HFTask

        task = HFTask(name, prompt_field=prompt_field, answer_field=answer_field)
    elif name == "champ":
        from .champ import Champ

        task = Champ()
    elif name.endswith(".jsonl") or Path(name).is_file():
        from .files import JsonlTask

        if not Path(name).is_file():
            raise ValueError(f"--dataset {name!r}: no such file")
        task = JsonlTask(name, prompt_field=prompt_field or "prompt", answer_field=answer_field or "answer")
    else:
        raise ValueError(f"--dataset {name!r}: unknown dataset (choose from {', '.join(NAMES)})")
    problems = task.problems()
    return task, problems[:limit] if limit is not None else problems
