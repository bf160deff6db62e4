"""Answer extractors: the part of a response a grader compares (pure Python).

Each takes the response text (already cut at the model's stop tokens) and returns the
answer string, or None when the response has none. Documented per task in docs/evaluation.md.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_ANSWER_LINE = re.compile(r"\banswer\s*(?::|=|is\b:?)\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


def boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def tagged(text: str) -> str | None:
    """The content of the first ``<answer>...</answer>`` (an unclosed tag runs to the end), or None."""
    m = _TAG.search(text)
    return m.group(1).strip() if m and m.group(1).strip() else None


def last_number(text: str) -> str | None:
    """The last number in ``text`` (``-12``, ``3.5``, ``1,234`` as ``1234``, ``2/3``), or None."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def final_answer(text: str) -> str | None:
    r"""The answer a reasoning response states, trying in order: ``<answer>`` tags,
    ``\boxed{}``, the last line of the form ``Answer: X`` / ``The final answer is X``."""
    for pick in (tagged, boxed):
        found = pick(text)
        if found is not None:
            return found
    lines = [m.group(1).strip().rstrip(".") for m in map(_ANSWER_LINE.search, text.splitlines()) if m]
    return lines[-1] if lines and lines[-1] else None


def numeric_answer(text: str) -> str | None:
    """The number in the stated answer (:func:`final_answer`), else the response's last number."""
    stated = final_answer(text)
    if stated is not None and (n := last_number(stated)) is not None:
        return n
    return last_number(text)


def code_block(text: str) -> str:
    """The first fenced Python code block (an unclosed fence runs to the end), else the whole text."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def same_number(a: str, b: str) -> bool:
    """Whether two number strings are equal as numbers (``"3.0"`` == ``"3"``, ``"1/2"`` == ``"0.5"``)."""
    try:
        return abs(_value(a) - _value(b)) <= 1e-9 * max(1.0, abs(_value(b)))
    except (ValueError, ZeroDivisionError):
        return a.strip() == b.strip()


def _value(s: str) -> float:
    s = s.strip().replace(",", "")
    if "/" in s:
        num, den = s.split("/", 1)
        return float(num) / float(den)
    return float(s)


_GSM8K = re.compile(r"####\s*(.+)")
_LATEX_NOISE = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ |\s+|\$")


def after_hashes(text: str) -> str | None:
    """GSM8K's answer line: the text after the last ``####`` (up to the line's end), or None."""
    found = _GSM8K.findall(text)
    return found[-1].strip() if found and found[-1].strip() else None


def reference_answer(solution: str) -> str:
    r"""A dataset's reference answer from its answer field: GSM8K's (after ``####``), MATH's
    (the last ``oxed{}``), else the field itself, trimmed."""
    for pick in (after_hashes, boxed):
        found = pick(solution)
        if found is not None:
            return found.replace(",", "") if last_number(found) == found.replace(",", "") else found
    return solution.strip()


def graded_answer(response: str, reference: str) -> str | None:
    r"""The answer a response gives, for comparison with ``reference``: after ``####``, else its
    stated answer (:func:`final_answer`: tags, ``oxed{}``, "the answer is"); for a numeric
    reference the number in it (or the response's last number)."""
    stated = after_hashes(response) or final_answer(response)
    if last_number(reference) == reference:
        return last_number(stated) if stated is not None and last_number(stated) else last_number(response)
    return stated


def normalize(answer: str) -> str:
    r"""An answer with LaTeX spacing, ``\left``/``
    ight``, ``$`` and a trailing period removed, and
        ``\dfrac``/``	frac`` as ``rac``."""
    s = _LATEX_NOISE.sub("", answer).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return s.rstrip(".")


def matches(got: str, reference: str) -> bool:
    """Whether an extracted answer equals the reference: as numbers when both are, else normalized text."""
    if last_number(reference) == reference and last_number(got) == got:
        return same_number(got, reference)
    return normalize(got) == normalize(reference)
