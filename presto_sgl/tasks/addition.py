"""Multi-digit addition with worked, right-to-left steps.

Pure Python (no torch). A problem is ``a + b`` with each operand drawn with a digit
count in ``digits`` (inclusive). The prompt and target look like::

    prompt: "Q:47+385="
    target: "7+5+0=12;4+8+1=13;0+3+1=04;A:432\\n"

One step per column, least significant first, for ``max(len(a), len(b))`` columns.
Every step has the same fixed width, ``x+y+c=ks;``: the column digits of ``a`` and ``b``
(``0`` where an operand has run out of digits), the carry in ``c`` (``0`` in the first
column), and the two-digit column sum ``ks`` (``k`` is the carry out, ``s`` the digit
of the answer). After the steps comes ``A:`` and the sum in decimal (most significant
digit first, no leading zeros), then the end-of-answer character ``"\\n"`` (``EOS``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = [
    "ALPHABET",
    "EOS",
    "Problem",
    "extract_answer",
    "is_correct",
    "make_problem",
    "make_problems",
    "prompt_for",
    "target_for",
]

EOS = "\n"
"""End-of-answer character: a completion is finished when it emits this."""

ALPHABET = "0123456789+=;:AQ" + EOS
"""Every character a prompt or a target uses (the end-of-answer character included)."""

_ANSWER = re.compile(r"A:(\d+)")


@dataclass(frozen=True)
class Problem:
    """One addition problem: ``prompt`` is what the model sees, ``target`` its ideal completion."""

    a: int
    b: int
    prompt: str
    target: str

    @property
    def answer(self) -> int:
        return self.a + self.b


def prompt_for(a: int, b: int) -> str:
    """The prompt for ``a + b``, e.g. ``"Q:47+85="``."""
    _check_operand(a, "a")
    _check_operand(b, "b")
    return f"Q:{a}+{b}="


def target_for(a: int, b: int) -> str:
    """The worked solution, answer and ``EOS`` for ``a + b`` (see the module docstring)."""
    _check_operand(a, "a")
    _check_operand(b, "b")
    da, db = str(a)[::-1], str(b)[::-1]
    steps = []
    carry = 0
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        total = x + y + carry
        steps.append(f"{x}+{y}+{carry}={total:02d};")
        carry = total // 10
    return "".join(steps) + f"A:{a + b}" + EOS


def make_problem(rng: random.Random, digits: tuple[int, int] = (2, 3)) -> Problem:
    """A random problem; each operand's digit count is uniform in ``digits`` (inclusive)."""
    lo, hi = digits
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ConfigError("digits", digits, f"{{digits}} (={digits!r}) must be (lo, hi) with 1 <= lo <= hi")
    na, nb = rng.randint(lo, hi), rng.randint(lo, hi)
    a = rng.randint(10 ** (na - 1) if na > 1 else 0, 10**na - 1)
    b = rng.randint(10 ** (nb - 1) if nb > 1 else 0, 10**nb - 1)
    return Problem(a=a, b=b, prompt=prompt_for(a, b), target=target_for(a, b))


def make_problems(n: int, seed: int, digits: tuple[int, int] = (2, 3)) -> list[Problem]:
    """``n`` problems from ``random.Random(seed)`` (a fixed, reproducible set)."""
    rng = random.Random(seed)
    return [make_problem(rng, digits) for _ in range(n)]


def extract_answer(text: str) -> int | None:
    """The integer after the first ``"A:"`` in ``text``, or None.

    Only the part of ``text`` before the first ``"\\n"`` is read, so anything after the
    end of the answer is ignored. The digits must run up to that newline (or to the end
    of ``text``, e.g. when a decoder dropped the end-of-answer token); ``"A:"`` without
    digits, or digits followed by other characters, gives None.
    """
    line = text.split(EOS, 1)[0]
    i = line.find("A:")
    if i < 0:
        return None
    m = _ANSWER.fullmatch(line[i:])
    return int(m.group(1)) if m else None


def is_correct(problem: Problem, completion_text: str) -> bool:
    """Whether the completion's answer (see :func:`extract_answer`) equals ``a + b``."""
    answer = extract_answer(completion_text)
    return answer is not None and answer == problem.a + problem.b


def _check_operand(x: int, name: str) -> None:
    if not isinstance(x, int) or isinstance(x, bool) or x < 0:
        raise ConfigError(name, x, f"{{{name}}} (={x!r}) must be a non-negative integer")
