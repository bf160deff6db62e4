"""A JSONL file of prompts as a task: one JSON object per line.

Fields: ``prompt`` (text, required; ``--prompt-field`` names another key), ``id`` (default:
the line number), ``answer`` (``--answer-field`` names another key)
(optional: graded by number when it is one, else by exact match after trimming, against
:func:`~presto_sgl.tasks.extract.final_answer` or else the whole response), ``chat``
(default true: apply the chat template), and a constraint of its own (structured power sampling:
a grammar by its kind's name, ``json_schema``, ``regex`` or ``ebnf``, and/or ``dtype``,
``min_tokens``), which ``presto-sgl run`` samples that problem under. Blank lines are skipped. A malformed line is
reported by its line number in :attr:`JsonlTask.errors` and left out; the rest are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..constraints import GRAMMARS, Constraint
from ..errors import ConfigError
from .base import Grade, Problem
from .extract import final_answer, last_number, same_number


class JsonlTask:
    grader = "exact match of the stated answer (numbers compared as numbers) when a line has 'answer'"

    def __init__(self, path: str | Path, *, prompt_field: str = "prompt", answer_field: str = "answer") -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self.errors: list[str] = []
        self._problems: list[Problem] = []
        seen: set[str] = set()
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    problem = _parse(json.loads(line), n, prompt_field, answer_field)
                    if problem.id in seen:
                        raise ValueError(f"duplicate id {problem.id!r}")
                except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
                    self.errors.append(f"{self.path}:{n}: {exc}")
                    continue
                seen.add(problem.id)
                self._problems.append(problem)

    def problems(self) -> list[Problem]:
        return list(self._problems)

    def grade(self, problem: Problem, response: str) -> Grade:
        if problem.reference is None:
            return Grade(correct=None, answer=None)
        ref = str(problem.reference).strip()
        stated = final_answer(response)
        if last_number(ref) == ref:
            got = last_number(stated if stated is not None else response)
            return Grade(correct=got is not None and same_number(got, ref), answer=got)
        got = (stated if stated is not None else response).strip()
        return Grade(correct=got == ref, answer=got)


def _parse(obj: object, line: int, prompt_field: str, answer_field: str) -> Problem:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    prompt = obj.get(prompt_field)
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{prompt_field!r} must be a non-empty string")
    chat = obj.get("chat", True)
    if not isinstance(chat, bool):
        raise ValueError(f"'chat' must be true or false, got {chat!r}")
    answer = obj.get(answer_field)
    if answer is not None and not isinstance(answer, (str, int, float)):
        raise ValueError(f"{answer_field!r} must be a string or a number, got {type(answer).__name__}")
    try:
        constraint = Constraint.of(**{k: obj[k] for k in CONSTRAINT_FIELDS if k in obj})
    except ConfigError as exc:
        raise ValueError(exc.render()) from None
    meta = {"constraint": constraint} if constraint is not None else {}
    return Problem(id=str(obj.get("id", line)), prompt=prompt, chat=chat, reference=answer, meta=meta)


CONSTRAINT_FIELDS = (*GRAMMARS, "dtype", "min_tokens")
"""A record's fields that make its constraint."""
