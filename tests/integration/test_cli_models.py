"""The CLI end to end on the embedded engine: the project's tiny model (fast) and, marked
slow, SmolLM2 from PyPI exactly as the README's first command runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from presto_sgl import cli
from presto_sgl.chain.trace import metrics_from_trace, read_trace
from presto_sgl.tasks.addition import is_correct, make_problem

REPO = Path(__file__).resolve().parents[2]  # the repository
TINY = ["sample", "--model", "tiny-adder", "--no-chat", "--max-new-tokens", "36", "--block-size", "12", "--steps", "6"]


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_tiny_model_power_samples_a_correct_answer_and_couples(capsys, tmp_path):
    import random

    problem = make_problem(random.Random(5))
    outs = {}
    for rule in ("sequential", "step"):
        trace = tmp_path / f"{rule}.jsonl"
        rc, out, err = run(capsys, *TINY, "--prompt", problem.prompt, "--rule", rule, "--json", "--trace", str(trace))
        assert rc == 0, err
        outs[rule] = json.loads(out)
        with open(trace) as f:
            assert metrics_from_trace(read_trace(f))[0].transitions == 18
    seq, step = outs["sequential"], outs["step"]
    assert len(seq["response_ids"]) == 36 and seq["metrics"]["model_calls"] == 18
    assert step["response_ids"] == seq["response_ids"]  # same keys -> same chain
    assert step["metrics"]["model_calls"] < seq["metrics"]["model_calls"]
    assert seq["eos_index"] is not None and "\n" not in seq["response_text"]
    assert is_correct(problem, seq["response_text"] + "\n"), seq["response_text"]


def test_tiny_model_text_summary_and_bad_input(capsys):
    rc, out, err = run(capsys, *TINY, "--prompt", "Q:12+34=")
    assert rc == 0, err
    assert "A:46" in out and "transitions/call" in out
    rc, _, err = run(capsys, *TINY, "--prompt", "Q:12+34=", "--max-new-tokens", "240", "--block-size", "12")
    assert rc == 2 and "`--max-new-tokens`" in err and "model context (128)" in err
    rc, _, err = run(capsys, "sample", "--model", "no-such-model", "--prompt", "hi")
    assert rc == 2 and "`--model`" in err and "no-such-model" in err


@pytest.mark.slow
def test_readme_main_command_on_smollm2(tmp_path):
    """`presto-sgl sample --prompt ...` on SmolLM2 from PyPI, as a user runs it (subprocess)."""
    cmd = [
        sys.executable,
        "-m",
        "presto_sgl",
        "sample",
        "--prompt",
        "What is 17 + 25?",
        "--max-new-tokens",
        "16",
        "--block-size",
        "16",
        "--steps",
        "4",
        "--json",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["engine"] == "embedded" and len(out["response_ids"]) == 16
    assert out["prompt_ids"][:3] == [1, 9690, 198]  # ChatML: <|im_start|>system\n
    assert out["metrics"]["transitions"] == 4 and out["response_text"].strip()
