"""Tests for the ``presto-sgl`` command line (in-process via ``main``, plus one subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from presto_sgl import cli
from presto_sgl.chain.trace import metrics_from_trace, read_trace
from presto_sgl.engines.base import Completion, EngineCapabilities
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM, ReferenceView
from presto_sgl.errors import EngineError

REPO = Path(__file__).resolve().parents[2]  # the repository
RUN = ["--max-new-tokens", "32", "--block-size", "16", "--steps", "8", "--seed", "3"]
SMALL = ["--prompt", "the cat", *RUN]
STAGES = 2
STEPS = 8


def run_json(capsys, *extra: str) -> dict:
    rc = cli.main(["sample", "--engine", "reference", *SMALL, "--json", *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def run_error(capsys, *argv: str) -> str:
    rc = cli.main(["sample", "--engine", "reference", *argv])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    return err


# -- results ------------------------------------------------------------------------
def test_json_output_sequential(capsys):
    data = run_json(capsys, "--rule", "sequential")
    assert len(data["response_ids"]) == 32
    assert data["prompt_ids"] == ReferenceEngine().encode("the cat")
    assert data["response_text"] == ReferenceEngine().decode(data["response_ids"])
    m = data["metrics"]
    assert m["transitions"] == STEPS * STAGES
    assert m["model_calls"] == STEPS * STAGES
    assert m["extend_calls"] == STAGES
    assert data["config"]["rule"] == "sequential" and data["config"]["method"] == "powermh"
    assert data["config"]["keying"] == "step"
    assert data["config"]["tau"] == pytest.approx(0.25)
    assert data["log_likelihood"] < 0
    assert data["log_likelihood_per_token"] == pytest.approx(data["log_likelihood"] / 32)


@pytest.mark.exactness
@pytest.mark.parametrize(
    ("rule_args", "keying"), [(("--rule", "bfs", "--budget", "8"), "path"), (("--rule", "step"), "step")]
)
def test_presto_rules_match_sequential_with_fewer_calls(capsys, rule_args, keying):
    seq = run_json(capsys, "--rule", "sequential", "--keying", keying)
    fast = run_json(capsys, *rule_args)
    assert fast["config"]["keying"] == keying
    assert fast["response_ids"] == seq["response_ids"]  # same keys -> the same chain
    assert fast["log_likelihood"] == seq["log_likelihood"]
    assert fast["metrics"]["transitions"] == seq["metrics"]["transitions"] == STEPS * STAGES
    assert fast["metrics"]["accepted"] == seq["metrics"]["accepted"]
    assert fast["metrics"]["model_calls"] < seq["metrics"]["model_calls"]


def test_seed_and_model_seed_change_the_result(capsys):
    a = run_json(capsys)
    assert run_json(capsys)["response_ids"] == a["response_ids"]
    assert run_json(capsys, "--seed", "4")["response_ids"] != a["response_ids"]
    assert run_json(capsys, "--model-seed", "1")["response_ids"] != a["response_ids"]


def test_prompt_ids_and_tau(capsys):
    rc = cli.main(["sample", "--engine", "reference", "--prompt-ids", "2,8,1", *RUN, "--tau", "0.5", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["prompt_ids"] == [2, 8, 1] == ReferenceEngine().encode("the")
    assert data["config"]["tau"] == 0.5
    assert data["response_ids"] != run_json(capsys)["response_ids"]  # tau 0.5, not 1/alpha


def test_prompt_and_prompt_ids_exclude_each_other(capsys):
    err = run_error(capsys, *SMALL, "--prompt-ids", "1,2")
    assert "--prompt-ids" in err and "--prompt" in err


def test_trace_reproduces_metrics(capsys, tmp_path):
    path = tmp_path / "trace.jsonl"
    data = run_json(capsys, "--rule", "bfs", "--budget", "8", "--trace", str(path))
    with open(path) as f:
        records = read_trace(f)
    assert records[0]["type"] == "run" and records[-1]["type"] == "summary"
    (metrics,) = metrics_from_trace(records)
    assert asdict(metrics) == data["metrics"]
    assert records[-1]["tokens"] == data["response_ids"]


def test_text_output_and_summary(capsys):
    rc = cli.main(["sample", "--engine", "reference", *SMALL, "--rule", "sequential"])
    out, _ = capsys.readouterr()
    assert rc == 0
    lines = out.splitlines()
    assert len(lines[0]) == 32  # the response text, one character per token
    for word in (
        "transitions",
        "acceptance rate",
        "model calls",
        "transitions/call",
        "issued",
        "realized",
        "unreachable",
        "call time",
        "coordinator time",
    ):
        assert word in out
    assert f"model calls       {STEPS * STAGES} " in out


def test_answer_ends_at_the_engines_first_stop_token(capsys, monkeypatch):
    """The chain keeps all its tokens; the answer (text and ``eos_index``) ends at the first of
    the engine text view's ``stop_ids``, not only at ``eos_token_id``."""
    full = run_json(capsys)
    ids = full["response_ids"]
    assert full["eos_index"] is None  # the reference engine has no stop tokens
    stop = ids[5]
    first = min(i for i, t in enumerate(ids) if t in (31, stop))
    engine = ReferenceEngine(ReferenceLM(32))
    engine.text = ReferenceView(32, stop_ids=(31, stop))  # e.g. the tokenizer's EOS and a generation-config EOS
    monkeypatch.setitem(cli.ENGINES, "reference", lambda args: engine)
    data = run_json(capsys)
    assert data["response_ids"] == ids and data["eos_index"] == first
    assert data["response_text"] == engine.decode(ids[:first])
    assert cli.main(["sample", "--engine", "reference", *SMALL]) == 0
    assert capsys.readouterr().out.split("\n")[0] == engine.decode(ids[:first])


def test_progress_goes_to_stderr_only(capsys):
    rc = cli.main(["sample", "--engine", "reference", *SMALL, "--json", "--progress"])
    out, err = capsys.readouterr()
    assert rc == 0
    data = json.loads(out)  # stdout stays one clean JSON object
    assert f"transitions {STEPS * STAGES}/{STEPS * STAGES}" in err
    assert f"model calls {data['metrics']['model_calls']}" in err
    rc = cli.main(["sample", "--engine", "reference", *SMALL, "--json"])  # captured stderr is no TTY: no progress
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""


# -- errors -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ((*SMALL, "--alpha", "0"), "--alpha"),
        ((*SMALL, "--tau", "-1"), "--tau"),
        ((*SMALL, "--max-new-tokens", "24"), "--max-new-tokens"),
        ((*SMALL, "--budget", "0"), "--budget"),
        ((*SMALL, "--steps", "-1"), "--steps"),
        ((*SMALL, "--rule", "bfs", "--keying", "step"), "--keying"),
        (("--prompt", "the #1 cat"), "--prompt"),
        (("--prompt", ""), "--prompt"),
        (("--prompt-ids", "1,99"), "--prompt-ids"),
        (("--prompt-ids", ","), "--prompt-ids"),
        (("--prompt-ids", "1,x"), "--prompt-ids"),
        (("--prompt", "hi", "--vocab-size", "1"), "--vocab-size"),
        (("--prompt", "hi", "--rule", "greedy"), "--rule"),
        ((), "--prompt"),
    ],
)
def test_bad_input_returns_2(capsys, argv, named):
    err = run_error(capsys, *argv)
    assert "error:" in err
    assert named in err


def test_bad_input_leaves_no_trace_file(capsys, tmp_path):
    path = tmp_path / "trace.jsonl"
    run_error(capsys, *SMALL, "--alpha", "0", "--trace", str(path))
    assert not path.exists()


def test_missing_command_and_help(capsys):
    assert cli.main([]) == 2
    assert cli.main(["sample", "--help"]) == 0
    assert "--max-new-tokens" in capsys.readouterr().out


class _FlakyEngine:
    """Reference engine that misbehaves on call ``fail_at``."""

    def __init__(self, fail_at: int, exc: type[BaseException] | None) -> None:
        self.inner = ReferenceEngine(ReferenceLM(32))
        self.capabilities: EngineCapabilities = self.inner.capabilities
        self.text = self.inner.text
        self.fail_at, self.exc, self.calls = fail_at, exc, 0

    def generate(self, requests):
        self.calls += 1
        out = self.inner.generate(requests)
        if self.calls == self.fail_at:
            if self.exc is not None:
                raise self.exc()
            c = out[0]
            out[0] = Completion(c.tokens[:-1], c.logq[:-1], c.logp[:-1])  # one token short
        return out


def test_engine_error_returns_3(capsys, monkeypatch):
    monkeypatch.setitem(cli.ENGINES, "reference", lambda args: _FlakyEngine(3, None))
    rc = cli.main(["sample", "--engine", "reference", *SMALL])
    out, err = capsys.readouterr()
    assert rc == 3 and out == ""
    assert err.startswith("presto-sgl: error:") and "wrong lengths" in err and "Traceback" not in err
    monkeypatch.setitem(cli.ENGINES, "reference", lambda args: _FlakyEngine(3, lambda: EngineError("boom")))
    assert cli.main(["sample", "--engine", "reference", *SMALL]) == 3
    assert "boom" in capsys.readouterr().err


def test_interrupt_returns_130_with_valid_trace(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(cli.ENGINES, "reference", lambda args: _FlakyEngine(5, KeyboardInterrupt))
    path = tmp_path / "trace.jsonl"
    rc = cli.main(
        ["sample", "--engine", "reference", *SMALL, "--rule", "sequential", "--trace", str(path), "--progress"]
    )
    out, err = capsys.readouterr()
    assert rc == 130 and out == ""
    assert "interrupted; trace holds the finished calls" in err
    with open(path) as f:
        records = read_trace(f)  # every line parses
    assert sum(r["type"] == "call" for r in records) == 4  # the extension and 3 MH calls
    (metrics,) = metrics_from_trace(records)
    assert metrics.model_calls == 3 and metrics.extend_calls == 1


# -- the real entry point ------------------------------------------------------------
def test_module_entry_point_subprocess(tmp_path):
    path = tmp_path / "trace.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "presto_sgl.cli",
            "sample",
            "--engine",
            "reference",
            *SMALL,
            "--json",
            "--trace",
            str(path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # stderr is a pipe: no progress line
    data = json.loads(proc.stdout)
    assert len(data["response_ids"]) == 32
    with open(path) as f:
        (metrics,) = metrics_from_trace(read_trace(f))
    assert asdict(metrics) == data["metrics"]
    bad = subprocess.run(
        [sys.executable, "-m", "presto_sgl", "sample", "--engine", "reference", "--prompt", "#"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("presto-sgl: error:") and "Traceback" not in bad.stderr


def test_entropycut_sampler_from_the_command_line(capsys):
    base = [
        "sample",
        "--engine",
        "reference",
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "16",
        "--block-size",
        "8",
        "--steps",
        "6",
        "--method",
        "entropycut",
        "--json",
    ]
    assert cli.main([*base, "--rule", "sequential", "--keying", "path"]) == 0
    seq = json.loads(capsys.readouterr().out)
    assert cli.main([*base, "--rule", "bfs"]) == 0
    bfs = json.loads(capsys.readouterr().out)
    assert seq["config"]["method"] == bfs["config"]["method"] == "entropycut" and bfs["config"]["beta"] == 4.0
    assert seq["response_ids"] == bfs["response_ids"]  # PreSTO-EntropyCut visits the sequential chain's states
    assert cli.main([*base, "--beta", "-1"]) == 2
    assert "`--beta`" in capsys.readouterr().err
    # the 0.x name of --method is gone
    assert cli.main([*base[:-3], "--sampler", "entropycut", "--json"]) == 2
    assert "unrecognized arguments: --sampler" in capsys.readouterr().err


def test_multitry_sampler_from_the_command_line(capsys, tmp_path):
    base = [
        "sample",
        "--engine",
        "reference",
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "16",
        "--block-size",
        "8",
        "--steps",
        "6",
        "--method",
        "multitry",
        "--tries",
        "3",
        "--try-temperatures",
        "0.5,1",
        "--json",
    ]
    assert cli.main([*base, "--rule", "sequential"]) == 0
    seq = json.loads(capsys.readouterr().out)
    trace = tmp_path / "mtm.jsonl"
    assert cli.main([*base, "--rule", "step", "--budget", "4", "--trace", str(trace)]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["config"]["method"] == "multitry" and step["config"]["tries"] == 3
    assert step["config"]["try_temperatures"] == [0.5, 1.0]
    assert seq["response_ids"] == step["response_ids"]  # PreSTO-MultiTryMH visits the sequential chain's states
    assert step["metrics"]["model_calls"] < seq["metrics"]["model_calls"]
    with open(trace) as f:
        records = read_trace(f)
    nodes = [r for r in records if r["type"] == "node"]
    assert nodes and all(n["draws"] == 5 for n in nodes) and {n["selected"] for n in nodes} <= {0, 1, 2}
    draws = [q for r in records if r["type"] == "call" and r["kind"] == "mh" for q in r["requests"]]
    assert {q["temperature"] for q in draws} == {0.5, 1.0} and len({q["seed"] for q in draws}) == len(draws)
    for flags, name in ((["--tries", "0"], "`--tries`"), (["--try-temperatures", "0.5,0"], "`--try-temperatures`")):
        assert cli.main([*base, *flags]) == 2
        assert name in capsys.readouterr().err
