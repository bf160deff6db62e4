"""The run directory: manifest, whole records on disk, resume and its refusals."""

from __future__ import annotations

import json

import pytest

from presto_sgl.evaluation.rundir import RECORDS, ConfigMismatch, RunDir

CONFIG = {"dataset": "addition", "seed": 0, "alpha": 4.0, "try_temperatures": (0.25, 1.0)}


def test_records_persist_and_resume(tmp_path):
    run = RunDir(tmp_path / "r", CONFIG, {"task": {"name": "addition"}})
    run.append({"id": "0", "x": 1})
    run.append({"id": "1", "x": 2})
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["config"]["try_temperatures"] == [0.25, 1.0] and manifest["task"]["name"] == "addition"
    assert "python" in manifest["versions"] and "torch" in manifest["versions"]
    again = RunDir(tmp_path / "r", dict(CONFIG), {})
    assert again.done_ids() == {"0", "1"} and again.warnings == []


def test_another_config_is_refused_with_the_difference_named(tmp_path):
    RunDir(tmp_path, CONFIG, {})
    with pytest.raises(ConfigMismatch, match=r"alpha: 4\.0 in the directory, 2\.0 now"):
        RunDir(tmp_path, {**CONFIG, "alpha": 2.0}, {})
    with pytest.raises(ConfigMismatch, match=r"rule: None in the directory, 'step' now"):
        RunDir(tmp_path, {**CONFIG, "rule": "step"}, {})


def test_a_record_cut_off_mid_write_is_dropped_and_the_file_repaired(tmp_path):
    run = RunDir(tmp_path, CONFIG, {})
    run.append({"id": "0"})
    with open(tmp_path / RECORDS, "ab") as f:
        f.write(b'{"id": "1", "resp')  # killed mid-write
    again = RunDir(tmp_path, CONFIG, {})
    assert again.done_ids() == {"0"} and "line 2" not in again.warnings[0] and ":2: dropped" in again.warnings[0]
    again.append({"id": "1"})
    assert [json.loads(x)["id"] for x in (tmp_path / RECORDS).read_text().splitlines()] == ["0", "1"]


def test_a_corrupted_record_in_the_middle_is_an_error_naming_the_line(tmp_path):
    RunDir(tmp_path, CONFIG, {})
    (tmp_path / RECORDS).write_text('{"id": "0"}\nnot json\n{"id": "2"}\n')
    with pytest.raises(ValueError, match=r"records\.jsonl:2: not a JSON record"):
        RunDir(tmp_path, CONFIG, {})
