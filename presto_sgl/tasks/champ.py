"""CHAMP (PyPI ``champ-dataset``, 270 competition-math problems), graded by answer matching.

Prompt: the problem and an instruction to end with the final answer in ``\\boxed{}``.
Extraction: :func:`~presto_sgl.tasks.extract.final_answer`. Grading is mechanical and so
approximate: a numeric reference is compared as a number, a yes/no reference by its first
word, anything else (expressions, sentences) by exact match after removing spaces, ``$``
and the dataset's ``@@`` math markers. Answers that are equal but written differently
(``2^n`` vs ``2**n``) count as wrong: read the accuracy as a lower bound.
"""

from __future__ import annotations

import re

from .base import Grade, Problem
from .extract import final_answer, last_number, same_number

INSTRUCTION = "{problem}\n\nSolve the problem, then state the final answer as \\boxed{{answer}}."
_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def _plain(s: str) -> str:
    return re.sub(r"[\s$@]|\\[,;!]", "", s).rstrip(".").lower()


class Champ:
    name = "champ"
    errors: tuple[str, ...] = ()  # every input is a problem
    grader = "answer match: numbers as numbers, yes/no by first word, else exact after normalizing (approximate)"

    def problems(self) -> list[Problem]:
        try:
            import champ_dataset
        except ImportError:
            raise ImportError("task champ needs the champ-dataset package: pip install -e '.[eval]'") from None
        data = champ_dataset.load("v0")
        return [
            Problem(id=pid, prompt=INSTRUCTION.format(problem=p.text), chat=True, reference=p.answer)
            for pid, p in data.problems.items()
        ]

    def grade(self, problem: Problem, response: str) -> Grade:
        ref, answer = problem.reference.strip(), final_answer(response)
        if answer is None:
            return Grade(correct=False, answer=None, detail="no answer found")
        if _NUM.fullmatch(_plain(ref)):
            got = last_number(answer)
            return Grade(correct=got is not None and same_number(got, _plain(ref)), answer=answer)
        first = ref.split()[0].strip(".,").lower()
        if first in ("yes", "no"):
            return Grade(
                correct=answer.split()[0].strip(".,").lower() == first if answer.split() else False, answer=answer
            )
        return Grade(correct=_plain(answer) == _plain(ref), answer=answer)
