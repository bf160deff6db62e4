"""A Hugging Face dataset as a task: ``--dataset hf:NAME[:CONFIG][:SPLIT]``.

NAME is what :func:`datasets.load_dataset` takes (a hub id, from the local cache when
offline, or a folder of Parquet / JSON / CSV files), or a folder written by
``Dataset.save_to_disk``; CONFIG may be empty (``hf:NAME::test``); SPLIT defaults to ``test``.
``--prompt-field`` / ``--answer-field`` name the columns (default: the first present of
``prompt, question, problem, input`` and of ``answer, solution, target``); an ``id`` column
names the problems, else the row number.

The reference answer is read as GSM8K writes it (the text after ``####``), as MATH writes
it (the last ``\\boxed{}``), or else whole; :func:`~presto_sgl.tasks.extract.reference_answer`.
A response is graded by :func:`~presto_sgl.tasks.extract.graded_answer`: numbers compared
as numbers, other answers after light LaTeX normalization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Grade, Problem
from .extract import graded_answer, matches, reference_answer

PROMPT_FIELDS = ("prompt", "question", "problem", "input")
ANSWER_FIELDS = ("answer", "solution", "target")


def parse_spec(spec: str) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG][:SPLIT]`` -> (NAME, CONFIG or None, SPLIT)."""
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 3:
        raise ValueError(f"--dataset {spec!r} must be hf:NAME[:CONFIG][:SPLIT] (e.g. hf:openai/gsm8k:main:test)")
    name, config, split = parts[0], (parts[1] if len(parts) > 1 else "") or None, (parts[2] if len(parts) > 2 else "")
    return name, config, split or "test"


def _load(name: str, config: str | None, split: str) -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(
            f"--dataset hf:... needs the `datasets` package ({exc}); pip install 'presto-sgl[eval]'"
        ) from None
    folder = Path(name)
    if folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()):
        data = datasets.load_from_disk(str(folder))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ValueError(f"--dataset hf:{name}: no split {split!r} (it has {sorted(data)})")
            data = data[split]
        return data
    try:
        return datasets.load_dataset(name, config, split=split)
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise ValueError(f"--dataset hf:{name}{':' + config if config else ''}:{split}: {exc}") from None


def _field(given: str | None, columns: list[str], names: tuple[str, ...], flag: str, required: bool) -> str | None:
    if given is not None:
        if given not in columns:
            raise ValueError(f"{flag} {given!r} is not a column of the dataset (it has {columns})")
        return given
    found = next((c for c in names if c in columns), None)
    if found is None and required:
        raise ValueError(
            f"the dataset has none of the columns {list(names)}; name the prompt's with {flag} (it has {columns})"
        )
    return found


class HFTask:
    """Problems from one split of a Hugging Face dataset; chat template applied."""

    errors: tuple[str, ...] = ()  # a bad row is an error, not left out

    def __init__(self, spec: str, *, prompt_field: str | None = None, answer_field: str | None = None) -> None:
        name, config, split = parse_spec(spec)
        data = _load(name, config, split)
        columns = list(data.column_names)
        self.prompt_field = _field(prompt_field, columns, PROMPT_FIELDS, "--prompt-field", True)
        self.answer_field = _field(answer_field, columns, ANSWER_FIELDS, "--answer-field", False)
        self.name = spec
        self.grader = (
            f"the answer in {self.answer_field!r} (after ####, in \\boxed{{}}, or whole) against the "
            "response's (after ####, stated, or its last number); numbers as numbers"
            if self.answer_field
            else "none (no answer column)"
        )
        self._problems = []
        for i, row in enumerate(data):
            prompt = row[self.prompt_field]
            if not isinstance(prompt, str) or not prompt:
                raise ValueError(f"--dataset {spec}: row {i}: {self.prompt_field!r} must be non-empty text")
            answer = row[self.answer_field] if self.answer_field else None
            ref = reference_answer(str(answer)) if answer is not None else None
            self._problems.append(
                Problem(
                    id=str(row.get("id", i)),
                    prompt=prompt,
                    chat=True,
                    reference=ref,
                    meta={"answer": answer} if answer is not None else {},
                )
            )

    def problems(self) -> list[Problem]:
        return list(self._problems)

    def grade(self, problem: Problem, response: str) -> Grade:
        if problem.reference is None:
            return Grade(correct=None, answer=None)
        got = graded_answer(response, problem.reference)
        return Grade(correct=got is not None and matches(got, problem.reference), answer=got)
