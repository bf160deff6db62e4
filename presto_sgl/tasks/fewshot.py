"""Few-shot tasks for base models (pure Python): ``--dataset arithmetic[:DIGITS[:TERMS]]`` and
``--dataset sequence``.

A base model (Gemma 3 270M, say) has no chat template and answers by continuing a pattern, so
the prompt is four worked equations and the question, with no instruction::

    4 + 8 = 12

    ...

    3 - 7 =

Operands have ``DIGITS`` digits (default 1), ``TERMS`` of them (default 2), each operator ``+`` or
``-`` (results may be negative); problems and shots come from the seed. With more than two terms
the shots work left to right, one running result at a time, so the answer is a short derivation::

    3 + 5 - 2 = 8 - 2 = 6

(Measured greedily on Gemma 3 270M, 30 problems: the two-term form solves about half of the
one-digit sums and differences, 2 of 30 with three terms and none with two digits; a ``Q: What is
4 + 8?`` / ``A:`` form about a seventh.) The answer is the integer after the last ``=`` of the
response's first line, or the integer opening it (a base model goes on with the next equation,
which is not graded).

``sequence`` is the next term of an arithmetic progression, from five terms (start 1..30, step
+-2..12), after four worked ones::

    28, 36, 44, 52, 60, 68

    16, 22, 28, 34, 40,

The answer is the integer opening the response (Gemma 3 270M, greedily: 10 of 30).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

from ..errors import ConfigError
from .base import Grade, Problem

SHOTS = 4
_LEADING_INT = re.compile(r"\s*(-?\d+)\b")


def _question(rng: random.Random, digits: int, terms: int) -> tuple[str, str, int]:
    """(question, its worked answer, the result): ``a op b op c =`` and ``r1 op c = r2``."""
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    value, *xs = (rng.randint(lo, hi) for _ in range(terms))
    rest = [(rng.choice("+-"), x) for x in xs]
    question = f"{value} " + " ".join(f"{op} {x}" for op, x in rest) + " ="
    steps = []
    for i, (op, x) in enumerate(rest):
        value = value + x if op == "+" else value - x
        steps.append(" ".join([str(value), *(f"{o} {y}" for o, y in rest[i + 1 :])]))
    return question, " = ".join(steps), value


class _FewShot:
    """Four worked examples, then the question, graded on one integer; no chat template."""

    name: str
    errors: tuple[str, ...] = ()  # every input is a problem
    grader: str

    def _pose(self, examples: Iterator[tuple[str, str, int]], size: int) -> None:
        """The problems from ``examples`` (question, worked answer, result): the first SHOTS
        worked, each of the next ``size`` a question after them."""
        context = "".join(f"{q} {worked}\n\n" for q, worked, _ in itertools.islice(examples, SHOTS))
        self._problems = [
            Problem(id=str(i), prompt=context + q, chat=False, reference=ans)
            for i, (q, _, ans) in enumerate(itertools.islice(examples, size))
        ]

    def problems(self) -> list[Problem]:
        return list(self._problems)

    def grade(self, problem: Problem, response: str) -> Grade:
        m = _LEADING_INT.match(self._answer_text(response))
        got = int(m.group(1)) if m else None
        return Grade(correct=got == problem.reference, answer=None if got is None else str(got))

    def _answer_text(self, response: str) -> str:
        """Where the graded integer opens."""
        return response


class Arithmetic(_FewShot):
    """Few-shot +/- of TERMS DIGITS-digit integers."""

    grader = "the integer after the last '=' of the response's first line (else opening it) equals the result"

    def __init__(self, options: str, size: int, seed: int) -> None:
        digits, terms = _numbers(options)
        self.name = f"arithmetic:{digits}" if terms == 2 else f"arithmetic:{digits}:{terms}"
        rng = random.Random(seed)
        self._pose((_question(rng, digits, terms) for _ in itertools.count()), size)

    def _answer_text(self, response: str) -> str:
        return response.split("\n", 1)[0].rsplit("=", 1)[-1]


def _numbers(options: str) -> tuple[int, int]:
    """(DIGITS, TERMS) of ``arithmetic[:DIGITS[:TERMS]]``'s options, checked."""
    parts = options.split(":") if options else []
    try:
        digits = int(parts[0]) if parts else 1
        terms = int(parts[1]) if len(parts) > 1 else 2
    except ValueError:
        digits = terms = 0
    if len(parts) > 2 or not 1 <= digits <= 9 or not 2 <= terms <= 9:
        raise ConfigError(
            "dataset",
            f"arithmetic:{options}",
            "{dataset}: arithmetic[:DIGITS[:TERMS]], DIGITS in 1..9, TERMS in 2..9 (e.g. arithmetic:1:3)",
        )
    return digits, terms


class Sequence(_FewShot):
    """Few-shot next term of an arithmetic progression."""

    name = "sequence"
    grader = "the integer opening the response equals the progression's next term"

    def __init__(self, size: int, seed: int) -> None:
        rng = random.Random(seed)
        self._pose((_progression(rng) for _ in itertools.count()), size)


def _progression(rng: random.Random) -> tuple[str, str, int]:
    """(five terms and a comma, the sixth term worked, the sixth term)."""
    start, step = rng.randint(1, 30), rng.choice((-1, 1)) * rng.randint(2, 12)
    terms = [start + i * step for i in range(6)]
    return ", ".join(map(str, terms[:5])) + ",", str(terms[5]), terms[5]
