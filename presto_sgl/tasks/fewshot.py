"""Few-shot arithmetic for base models (``--dataset arithmetic[:DIGITS]``; pure Python).

A base model (Gemma 3 270M, say) has no chat template and answers by continuing a pattern, so
the prompt is four worked equations and the question, with no instruction::

    4 + 8 = 12

    ...

    3 - 7 =

Operands have ``DIGITS`` digits (default 1), the operator is ``+`` or ``-`` (results may be
negative); problems and shots come from the seed. (Measured greedily on Gemma 3 270M, 30
problems: this form solves about half of the one-digit sums and differences and none with two
digits; a ``Q: What is 4 + 8?`` / ``A:`` form about a seventh.) The answer is the integer that
opens the response's first line (a base model goes on with the next equation, which is not graded).
"""

from __future__ import annotations

import random
import re

from ..errors import ConfigError
from .base import Grade, Problem

SHOTS = 4
_LEADING_INT = re.compile(r"\s*(-?\d+)\b")


def _question(rng: random.Random, digits: int) -> tuple[str, int]:
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    a, b, op = rng.randint(lo, hi), rng.randint(lo, hi), rng.choice("+-")
    return f"{a} {op} {b} =", a + b if op == "+" else a - b


class Arithmetic:
    """Few-shot +/- of two DIGITS-digit integers; no chat template."""

    name = "arithmetic"
    errors: tuple[str, ...] = ()  # every input is a problem
    grader = "the integer opening the response's first line equals the result"

    def __init__(self, options: str, size: int, seed: int) -> None:
        try:
            digits = int(options) if options else 1
        except ValueError:
            digits = 0
        if not 1 <= digits <= 9:
            raise ConfigError("dataset", f"arithmetic:{options}", "{dataset}: arithmetic[:DIGITS], DIGITS in 1..9")
        self.name = f"arithmetic:{digits}"
        rng = random.Random(seed)
        shots = [_question(rng, digits) for _ in range(SHOTS)]
        context = "".join(f"{q} {ans}\n\n" for q, ans in shots)
        self._problems = [
            Problem(id=str(i), prompt=context + q, chat=False, reference=ans)
            for i, (q, ans) in enumerate(_question(rng, digits) for _ in range(size))
        ]

    def problems(self) -> list[Problem]:
        return list(self._problems)

    def grade(self, problem: Problem, response: str) -> Grade:
        m = _LEADING_INT.match(response.split("\n", 1)[0])
        got = int(m.group(1)) if m else None
        return Grade(correct=got == problem.reference, answer=None if got is None else str(got))
