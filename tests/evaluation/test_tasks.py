"""Answer extraction, the grading sandbox, and the tasks that need no optional package."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from presto_sgl.errors import ConfigError
from presto_sgl.tasks import extract
from presto_sgl.tasks.registry import load_task
from presto_sgl.tasks.sandbox import network_isolated, run_python


@pytest.mark.parametrize(
    "text, want",
    [
        ("so <answer> 42 </answer> done", "42"),
        ("<answer>7", "7"),
        ("thus \\boxed{\\frac{1}{2}} and", "\\frac{1}{2}"),
        ("Step 1.\nAnswer: 12.", "12"),
        ("The final answer is 3/4", "3/4"),
        ("no answer here", None),
    ],
)
def test_final_answer(text, want):
    assert extract.final_answer(text) == want


def test_numbers():
    assert extract.numeric_answer("I think 3 apples, so <answer>1,204 apples</answer>") == "1204"
    assert extract.numeric_answer("2 then 5 then -7.5") == "-7.5"
    assert extract.same_number("3.0", "3") and extract.same_number("1/2", "0.5") and not extract.same_number("2", "3")
    assert extract.code_block("text\n```python\ndef f():\n    return 1\n```\nmore") == "def f():\n    return 1\n"
    assert extract.code_block("def f(): pass") == "def f(): pass"


def test_sandbox_outcomes():
    assert run_python("assert 1 + 1 == 2").passed
    out = run_python("raise ValueError('boom')")
    assert out.status == "failed" and "ValueError: boom" in out.detail
    assert run_python("while True: pass", timeout_s=1).status == "timeout"
    assert run_python("import time\ntime.sleep(30)", timeout_s=1).status == "timeout"  # wall clock, not CPU
    assert run_python("x = bytearray(2 << 30)", memory_mb=256).status == "memory"


def test_sandbox_has_no_network_and_no_environment(monkeypatch):
    monkeypatch.setenv("PRESTO_SECRET", "leak")
    program = (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9))\n"
        "except OSError as e:\n    assert 'disabled' in str(e), e\n"
    )
    assert run_python(program).passed
    assert run_python("import os\nassert 'PRESTO_SECRET' not in os.environ").passed
    if network_isolated():  # even a socket made past the guard sees no interface but a down loopback
        assert (
            run_python("import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('1.1.1.1', 53))").status
            == "failed"
        )


def test_hostile_completions_fail_cleanly(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("important")
    deleted = run_python(f"import os\nos.remove({str(victim)!r})")
    assert deleted.status == "failed" and "PermissionError" in deleted.detail and victim.exists()
    assert "PermissionError" in run_python("import subprocess\nsubprocess.run(['ls'])").detail
    assert "PermissionError" in run_python("import shutil\nshutil.rmtree('/tmp')").detail
    flood = run_python(
        "import sys\nfor _ in range(10**6):\n    sys.stderr.write('x' * 1000)\n    print('y' * 1000)", timeout_s=20
    )
    assert flood.status in ("failed", "timeout") and len(flood.detail) <= 300  # killed at the 16 MiB file limit
    assert run_python("print('z' * 10**7)").passed  # stdout is discarded, not limited
    for early in ("import sys\nsys.exit(0)", "import os\nos._exit(0)"):  # skipping the tests is no pass
        out = run_python(early + "\nassert False")
        assert out.status == "failed" and "before the end" in out.detail


def _gone(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` (started at ``started``, field 22 of /proc/PID/stat) has ended: no
    such process, another one (the pid reused), or a zombie no one reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return True
    return fields[0] in ("Z", "X") or (started is not None and fields[19] != started)


def test_sandbox_kills_forked_children(tmp_path):
    """The forked child would write its flag 60 s on; once it is gone, the flag says whether it
    was killed with its parent at the sandbox's limit, or ran on until it wrote it."""
    import time

    flag, pid_file = tmp_path / "child-alive", tmp_path / "child-pid"
    program = (
        f"import os, posix, time\nif posix.fork() == 0:  # past the guard on os.fork\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    time.sleep(60)\n"
        f"    open({str(flag)!r}, 'w').write('x')\n    os._exit(0)\ntime.sleep(300)\n"
    )
    assert run_python(program, timeout_s=5).status == "timeout"
    assert pid_file.exists(), "the program did not fork within its 5 s"
    if not pid_file.read_text():  # killed while it wrote its pid
        return
    pid = int(pid_file.read_text())
    try:
        with open(f"/proc/{pid}/stat") as f:
            started: str | None = f.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        started = None
    deadline = time.monotonic() + 120
    while not _gone(pid, started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid, started) and not flag.exists()


def test_addition_task_grades_the_answer():
    task, problems = load_task("addition", limit=5, seed=3)
    assert len(problems) == 5 and not problems[0].chat
    p = problems[0]
    assert task.grade(p, f"x;A:{p.reference}").correct is True
    assert task.grade(p, f"x;A:{p.reference + 1}").correct is False
    assert task.grade(p, "garbage").correct is False
    _, more = load_task("addition", limit=8, seed=3)
    assert [q.prompt for q in more[:5]] == [q.prompt for q in problems]  # a larger limit extends, never reshuffles


def test_fewshot_arithmetic_for_base_models():
    """Four worked equations then the question, no chat template; the answer opens the first line."""
    task, problems = load_task("arithmetic", limit=50, seed=2)
    p = problems[0]
    assert task.name == "arithmetic:1" and not p.chat and p.prompt.count(" = ") == 4
    assert re.search(r"\n\n\d [+-] \d =$", p.prompt) and re.match(r"\d [+-] \d = -?\d+\n\n", p.prompt)
    shots = p.prompt.rsplit("\n\n", 1)[0]
    assert all(q.prompt.startswith(shots) for q in problems)  # the same shots for every problem
    assert task.grade(p, f" {p.reference}\n\n1 + 1 = 2").correct is True
    assert task.grade(p, f" {p.reference + 1}\n{p.reference}").correct is False  # only the first line counts
    assert task.grade(p, " about twelve").answer is None
    assert [q.prompt for q in load_task("arithmetic:1", limit=50, seed=2)[1]] == [q.prompt for q in problems]
    assert any(q.reference < 0 for q in problems)  # subtraction may go below zero
    _, twos = load_task("arithmetic:2", limit=5, seed=2)
    assert all(re.search(r"\n\n\d\d [+-] \d\d =$", q.prompt) for q in twos)
    with pytest.raises(ConfigError, match=r"DIGITS in 1\.\.9"):
        load_task("arithmetic:x")


def test_fewshot_arithmetic_with_more_terms_works_left_to_right():
    task, problems = load_task("arithmetic:1:3", limit=40, seed=1)
    assert task.name == "arithmetic:1:3"
    shots = problems[0].prompt.rsplit("\n\n", 1)[0].split("\n\n")
    for shot in shots:  # "3 + 5 - 2 = 8 - 2 = 6": each step folds the first two terms
        question, *steps = shot.split(" = ")
        assert len(steps) == 2 and eval(steps[0]) == eval(question) == int(steps[1])
    for p in problems:
        question = p.prompt.rsplit("\n\n", 1)[1]
        assert re.fullmatch(r"\d [+-] \d [+-] \d =", question) and eval(question[:-2]) == p.reference
    p = problems[0]
    assert task.grade(p, f" {p.reference + 3} - 3 = {p.reference}\n\n1 + 1 + 1").correct is True  # after the last =
    assert task.grade(p, f" {p.reference}\n").correct is True  # a bare answer opens the line
    assert task.grade(p, f" 1 + 2 = {p.reference + 1}\n{p.reference}").correct is False
    for bad in ("arithmetic:1:1", "arithmetic:1:x", "arithmetic:1:3:4"):
        with pytest.raises(ConfigError, match=r"TERMS in 2\.\.9"):
            load_task(bad)


def test_fewshot_sequence_asks_the_next_term():
    task, problems = load_task("sequence", limit=60, seed=3)
    assert task.name == "sequence" and not problems[0].chat
    shots = problems[0].prompt.rsplit("\n\n", 1)[0].split("\n\n")
    assert len(shots) == 4 and all(q.prompt.startswith("\n\n".join(shots)) for q in problems)
    for p in problems:
        terms = [int(x) for x in p.prompt.rsplit("\n\n", 1)[1].rstrip(",").split(", ")]
        steps = {b - a for a, b in itertools.pairwise(terms)}
        assert len(terms) == 5 and len(steps) == 1 and 2 <= abs(step := steps.pop()) <= 12
        assert p.reference == terms[-1] + step
    assert any(p.reference < 0 for p in problems) and any(p.reference > 40 for p in problems)
    p = problems[0]
    assert task.grade(p, f" {p.reference}, {p.reference + 1},").correct is True
    assert task.grade(p, f" {p.reference + 1}, {p.reference},").correct is False  # the next term only
    assert task.grade(p, " next").answer is None


def test_jsonl_task_reports_bad_lines_and_goes_on(tmp_path):
    path = tmp_path / "prompts.jsonl"
    lines = [
        json.dumps({"prompt": "What is 2+2?", "answer": 4, "id": "a"}),
        "{not json",
        json.dumps({"answer": 3}),
        "",
        json.dumps({"prompt": "Say hi.", "chat": "yes"}),
        json.dumps({"prompt": "Name a color."}),
        json.dumps({"prompt": "again", "id": "a"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    task, problems = load_task(str(path))
    assert [p.id for p in problems] == ["a", "6"]
    assert [re.search(r"prompts\.jsonl:(\d+):", e).group(1) for e in task.errors] == ["2", "3", "5", "7"]
    assert "'prompt' must be a non-empty string" in task.errors[1] and "duplicate id 'a'" in task.errors[3]
    assert task.grade(problems[0], "it is <answer>4</answer>").correct is True
    assert task.grade(problems[0], "5").correct is False
    assert task.grade(problems[1], "blue").correct is None


@pytest.mark.parametrize("name, message", [("nope", "unknown dataset"), ("missing.jsonl", "no such file")])
def test_unknown_datasets_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        load_task(name)
    with pytest.raises(ValueError, match="--limit"):
        load_task("addition", limit=0)
