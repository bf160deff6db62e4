"""What an evaluation task is: problems in, a grade per response out (pure Python).

A :class:`Task` lists its :class:`Problem` s (a stable ``id``, the prompt text, whether the
engine should apply the chat template, and what the grader needs) and grades a response
text (cut at the model's stop tokens) into a :class:`Grade`. Tasks by name:
:func:`presto_sgl.tasks.registry.load_task`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str
    chat: bool = True
    reference: Any = None  # JSON-serializable: the answer, or what the grader needs
    _: KW_ONLY
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Grade:
    """``correct``: True / False, or None when the problem has no reference answer.
    ``score`` in [0, 1] (partial credit where the task gives it); ``answer``: what was extracted."""

    correct: bool | None
    answer: str | None
    score: float | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.score is None and self.correct is not None:
            object.__setattr__(self, "score", float(self.correct))


class Task(Protocol):
    name: str
    grader: str  # how grades are decided, one line (for the run manifest and the report)

    @property
    def errors(self) -> Sequence[str]:
        """Inputs left out, one line each (a file's bad lines): ``run`` prints them as warnings."""
        ...

    def problems(self) -> list[Problem]: ...

    def grade(self, problem: Problem, response: str) -> Grade: ...
