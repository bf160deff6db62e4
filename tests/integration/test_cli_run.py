"""``presto-sgl run`` end to end on the embedded engine with the project's tiny model:
records, grades, the paper's statistics, resume and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from presto_sgl import cli

TINY = ["run", "--model", "tiny-adder", "--max-new-tokens", "36", "--block-size", "12", "--steps", "4"]


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_run_grades_records_and_resumes(capsys, tmp_path):
    out = tmp_path / "run"
    rc = cli.main([*TINY, "--dataset", "addition", "--limit", "4", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    recs = records(out)
    assert sorted(r["id"] for r in recs) == ["0", "1", "2", "3"] and "4 to run" in err
    assert f"{len(recs)} records, accuracy" in stdout
    for r in recs:
        assert len(r["response_ids"]) == 36 and r["metrics"]["transitions"] == 12
        assert r["grade"]["correct"] in (True, False) and r["grade"]["score"] == float(r["grade"]["correct"])
        assert r["rescored_log_p0"] == pytest.approx(r["log_p0"], abs=1e-3)  # the paper's rescoring check
        assert r["log_likelihood"] == pytest.approx(r["log_p0"] / 36, abs=1e-4) and r["confidence"] <= 0
    assert sum(r["grade"]["correct"] for r in recs) >= 3  # the tiny model mostly adds right
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["rule"] == "step" and manifest["task"]["problems"] == 4

    rc = cli.main([*TINY, "--dataset", "addition", "--limit", "6", "--out", str(out)])
    _, err = capsys.readouterr()
    assert rc == 0 and "4 already in" in err and "2 to run" in err
    again = records(out)
    assert again[:4] == recs and sorted(r["id"] for r in again[4:]) == ["4", "5"]

    rc = cli.main([*TINY, "--dataset", "addition", "--limit", "6", "--out", str(out), "--alpha", "2"])
    _, err = capsys.readouterr()
    assert rc == 2 and "alpha: 4.0 in the directory, 2.0 now" in err and len(records(out)) == 6
    rc = cli.main([*TINY, "--dataset", "addition", "--out", str(tmp_path / "other"), "--label", " "])
    assert rc == 2 and "--label" in capsys.readouterr().err


def test_presto_and_sequential_runs_sample_the_same_chains(capsys, tmp_path):
    for rule in ("sequential", "step"):
        assert (
            cli.main(
                [
                    *TINY,
                    "--dataset",
                    "addition",
                    "--limit",
                    "3",
                    "--rule",
                    rule,
                    "--no-rescore",
                    "--traces",
                    "--out",
                    str(tmp_path / rule),
                ]
            )
            == 0
        )
    capsys.readouterr()
    trace = [json.loads(x) for x in (tmp_path / "step" / "traces" / "1.jsonl").read_text().splitlines()]
    assert trace[0]["type"] == "run" and trace[-1]["type"] == "summary"
    seq, pre = ({r["id"]: r for r in records(tmp_path / rule)} for rule in ("sequential", "step"))
    assert {k: r["response_ids"] for k, r in seq.items()} == {k: r["response_ids"] for k, r in pre.items()}
    assert all(r["rescored_log_p0"] is None and r["confidence"] is None for r in seq.values())
    assert sum(r["metrics"]["model_calls"] for r in pre.values()) < sum(
        r["metrics"]["model_calls"] for r in seq.values()
    )


def test_bad_lines_of_a_prompt_file_are_reported_and_the_rest_run(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Q:12+34=", "answer": "46", "chat": false}\n{"prompt": 5}\n')
    rc = cli.main([*TINY, "--dataset", str(prompts), "--out", str(tmp_path / "r"), "--no-rescore"])
    _, err = capsys.readouterr()
    assert rc == 0 and "p.jsonl:2: 'prompt' must be a non-empty string" in err
    (rec,) = records(tmp_path / "r")
    assert rec["id"] == "1" and rec["grade"]["correct"] is (rec["grade"]["answer"] == "46")
    rc = cli.main([*TINY, "--dataset", "reasoning-gym:no_such_task", "--out", str(tmp_path / "g")])
    _, err = capsys.readouterr()
    assert rc == 2 and ("unknown reasoning-gym task" in err or "pip install" in err)


@pytest.mark.slow
def test_baselines_and_the_report(capsys, tmp_path):
    runs = {
        "sequential": ["--rule", "sequential", "--keying", "path"],
        "bfs": ["--rule", "bfs", "--budget", "6"],
        "step": ["--rule", "step", "--label", "my step run"],
        "lowtemp": ["--method", "lowtemp"],
        "bestofn": ["--method", "bestofn", "--best-of", "4"],
        "powersmc": ["--method", "powersmc", "--particles", "4"],
    }
    for name, extra in runs.items():
        rc = cli.main(
            [*TINY, "--dataset", "addition", "--limit", "4", *extra, "--traces", "--out", str(tmp_path / name)]
        )
        assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    bon = records(tmp_path / "bestofn")
    assert all(r["metrics"]["extend_calls"] == 1 and r["metrics"]["tokens_decoded"] == 4 * 36 for r in bon)
    assert all(r["metrics"]["kv_tokens_peak"] == 4 * (len(r["prompt_ids"]) + 36) for r in bon)  # 4 rows at once
    smc = records(tmp_path / "powersmc")
    assert all(r["metrics"]["extend_calls"] == 3 and r["metrics"]["model_calls"] == 0 for r in smc)
    assert json.loads((tmp_path / "powersmc" / "manifest.json").read_text())["config"]["ramp_tokens"] == 14
    out = tmp_path / "report"
    assert cli.main(["report", *(str(tmp_path / n) for n in runs), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert (
        "| bestofn | bestofn N=4 | 4 |" in text
        and "KV tokens of a call, peak" in text
        and "PreSTO vs sequential" in text
        and "paired TOST" in text
    )
    assert "| step | my step run | 4 |" in text  # --label names the run
    paired = text.split("PreSTO vs sequential")[1]
    assert "PreSTO bfs" in paired and "my step run" not in paired  # step keys: no sequential run with its keys
    for png in (
        "accuracy_vs_time",
        "speedup_vs_budget",
        "calls_vs_time_per_call",
        "certainty",
        "prefetch_tree",
        "tost_forest",
    ):
        assert (out / f"{png}.png").stat().st_size > 5000 and f"({png}.png)" in text
    results = json.loads((out / "results.json").read_text())
    assert [r["label"] for r in results["runs"]][2] == "my step run" and results["runs"][0]["problems"] == 4
    assert {Path(s["run"]).name for s in results["speedups"]} == {"bfs"} and results["speedups"][0][
        "median_speedup"
    ] > 0
    assert cli.main(["report", str(tmp_path / "nothing"), "--out", str(out)]) == 2


def test_samples_give_pass_at_k_in_results_json(capsys, tmp_path):
    """--samples 3: three chains per problem (sample 0 keyed as without --samples), pass@k by the
    unbiased estimator from the records' grades, all in results.json."""
    from math import comb

    argv = [*TINY, "--dataset", "addition", "--limit", "3", "--no-rescore", "--alpha", "1.0", "--tau", "1.5"]
    assert cli.main([*argv, "--samples", "3", "--out", str(tmp_path / "k")]) == 0
    assert "pass@3" in capsys.readouterr().out
    recs = records(tmp_path / "k")
    assert sorted(r["id"] for r in recs) == ["0", "0#1", "0#2", "1", "1#1", "1#2", "2", "2#1", "2#2"]
    assert cli.main([*argv, "--out", str(tmp_path / "one")]) == 0
    one = {r["id"]: r["response_ids"] for r in records(tmp_path / "one")}
    assert {r["id"]: r["response_ids"] for r in recs if r["sample"] == 0} == one
    results = json.loads((tmp_path / "k" / "results.json").read_text())
    correct = {p: sum(r["grade"]["correct"] for r in recs if r["problem"] == p) for p in ("0", "1", "2")}
    want = {
        k: sum(1 - comb(3 - c, k) / comb(3, k) if 3 - c >= k else 1.0 for c in correct.values()) / 3 for k in (1, 2, 3)
    }
    assert results["pass_at_k"] == pytest.approx({str(k): v for k, v in want.items()})
    assert results["accuracy"] == pytest.approx(sum(correct.values()) / 9) and results["samples_per_problem"] == 3
    assert results["config"]["samples"] == 3 and results["chains"]["transitions"] == 9 * 12


def test_a_hugging_face_dataset_from_disk_and_parquet(capsys, tmp_path):
    """--dataset hf:DIR (save_to_disk) and hf:DIR-of-Parquet::test, with GSM8K-style answers
    (#### N) in a renamed column; graded by the number after ####, else the last number."""
    datasets = pytest.importorskip("datasets")
    rows = {
        "q": [f"Q:{a}+{b}=" for a, b in ((12, 34), (5, 6), (70, 8))],
        "sol": [f"{a} plus {b}\n#### {a + b}" for a, b in ((12, 34), (5, 6), (70, 8))],
    }
    data = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"test": data}).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "pq").mkdir()
    data.to_parquet(str(tmp_path / "pq" / "test.parquet"))
    argv = [*TINY, "--no-chat", "--no-rescore", "--prompt-field", "q", "--answer-field", "sol"]
    for spec in (f"hf:{tmp_path / 'saved'}", f"hf:{tmp_path / 'pq'}::test"):
        out = tmp_path / spec.replace("/", "_").replace(":", "_")
        assert cli.main([*argv, "--dataset", spec, "--out", str(out)]) == 0, capsys.readouterr().err
        recs = records(out)
        assert [r["prompt"] for r in recs] == rows["q"]
        for r, want in zip(recs, ("46", "11", "78")):
            assert r["grade"]["correct"] is (r["grade"]["answer"] == want)
        assert sum(r["grade"]["correct"] for r in recs) >= 2  # the tiny model mostly adds right
    assert (
        cli.main(
            [
                *argv[:-4],
                "--prompt-field",
                "nope",
                "--dataset",
                f"hf:{tmp_path / 'saved'}",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "--prompt-field 'nope' is not a column" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_killed_midway_resumes_to_the_same_records(capsys, tmp_path):
    """kill -9 after two records, with the third chain under way; rerun: the third chain goes on
    from its trace, and the records equal an uninterrupted run's (seeded engine)."""
    import os
    import signal
    import subprocess
    import time

    from tests.support.held_cli import held_cli

    argv = [*TINY, "--dataset", "addition", "--limit", "6", "--no-rescore", "--traces"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(  # the third chain stops before its trace's fifth record, until killed
        [*held_cli(5, os.sep + "2.jsonl"), *argv, "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        path, third = killed / "records.jsonl", killed / "traces" / "2.jsonl"
        if (
            path.exists()
            and len(path.read_text().splitlines()) >= 2
            and third.exists()
            and third.read_text().count("\n") >= 4
        ):
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = records(killed)
    assert 2 <= len(partial) < 6
    assert cli.main([*argv, "--out", str(killed)]) == 0
    resumed = [t for t in (killed / "traces").iterdir() if '"type": "resume"' in t.read_text()]
    assert [t.name for t in resumed] == ["2.jsonl"]
    assert cli.main([*argv, "--out", str(tmp_path / "whole")]) == 0
    capsys.readouterr()
    got = {r["id"]: r for r in records(killed)}
    want = {r["id"]: r for r in records(tmp_path / "whole")}
    assert sorted(got) == sorted(want) and len(got) == 6
    for i, r in want.items():
        assert (got[i]["response_ids"], got[i]["grade"]) == (r["response_ids"], r["grade"])
        assert got[i]["log_p0"] == pytest.approx(r["log_p0"], abs=1e-4)
