"""``presto-sgl sample --resume TRACE`` against real signals: the CLI is killed (SIGKILL, or
SIGINT as Ctrl-C) at random points of its trace, resumed, and must end in the tokens and
transitions of an uninterrupted run (seeded reference engine)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from presto_sgl import cli
from tests.support.held_cli import held_cli

pytestmark = pytest.mark.exactness

REPO = Path(__file__).resolve().parents[2]
OPTIONS = ["--engine", "reference", "--max-new-tokens", "64", "--block-size", "8", "--steps", "12"]
NODE_FIELDS = ("stage", "k", "decision", "cut", "uniform", "accepted")


def nodes(path: Path) -> list[tuple]:
    return [
        tuple(r[f] for f in NODE_FIELDS) for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "node"
    ]


def sample(capsys, *argv: str) -> dict:
    rc = cli.main(["sample", *OPTIONS, "--json", *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def kill_at(path: Path, lines: int, sig: int, rule: str) -> int:
    """Start the CLI writing its trace to ``path``, send ``sig`` once the trace has ``lines``
    lines (the process is then anywhere after them: mid-call or mid-write, or waiting before
    its last record, the summary, which it writes only when left alone for minutes); its exit code."""
    argv = [
        *held_cli("summary"),
        "sample",
        *OPTIONS,
        "--rule",
        rule,
        "--prompt-ids",
        "1,2,3",
        "--seed",
        "4",
        "--trace",
        str(path),
    ]
    # SIGINT as Ctrl-C gives it, also where this test itself runs with SIGINT ignored (a background job)
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= lines:
            os.kill(proc.pid, sig)
            break
        time.sleep(0.001)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT and proc.returncode == 130:
        assert f"sample --resume {path}" in err
    return proc.returncode


@pytest.mark.parametrize("rule", ["sequential", "bfs"])
def test_killed_cli_resumes_to_the_uninterrupted_chain(capsys, tmp_path, rule):
    whole = tmp_path / "whole.jsonl"
    want = sample(capsys, "--rule", rule, "--prompt-ids", "1,2,3", "--seed", "4", "--trace", str(whole))
    total = whole.read_bytes().count(b"\n")
    rng = random.Random(rule)
    killed = 0
    for i, sig in enumerate([signal.SIGKILL, signal.SIGKILL, signal.SIGKILL, signal.SIGINT]):
        path = tmp_path / f"killed{i}.jsonl"
        rc = kill_at(path, rng.randrange(1, total - 2), sig, rule)
        killed += rc in (-signal.SIGKILL, 130)
        got = sample(capsys, "--rule", rule, "--resume", str(path))  # prompt and seed from the trace
        assert got["response_ids"] == want["response_ids"], f"kill {i} (rc {rc})"
        assert nodes(path) == nodes(whole)
        assert got["metrics"]["transitions"] == want["metrics"]["transitions"]
    assert killed >= 3, "the CLI finished before most signals arrived: nothing was interrupted"


def test_resume_refuses_other_options_and_a_trace_flag(capsys, tmp_path):
    path = tmp_path / "t.jsonl"
    sample(capsys, "--prompt-ids", "1,2,3", "--trace", str(path))
    before = path.read_text()
    for argv, named in (
        (("--steps", "5"), "`--steps` (trace 12, now 5)"),
        (("--rule", "bfs"), "`--rule` (trace 'step', now 'bfs')"),
        (("--trace", str(tmp_path / "x")), "drop `--trace`"),
        (("--prompt-ids", "1,2"), "`--prompt`"),
    ):
        rc = cli.main(["sample", *OPTIONS, "--resume", str(path), *argv])
        err = capsys.readouterr().err
        assert rc == 2 and named in err, err
    assert path.read_text() == before  # a refused resume leaves the trace alone
    rc = cli.main(["sample", *OPTIONS, "--resume", str(tmp_path / "missing.jsonl")])
    assert rc == 2 and "cannot read trace" in capsys.readouterr().err
