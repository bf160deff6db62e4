"""Paired TOST and Holm adjustment, against scipy's t distribution and hand-made runs."""

from __future__ import annotations

import json
import math
import random

import pytest

pytest.importorskip("scipy")

from presto_sgl import cli
from presto_sgl.evaluation.equivalence import compare_runs, holm, paired_tost


def test_tost_matches_two_one_sided_t_tests():
    from scipy import stats

    rng = random.Random(0)
    a = [rng.gauss(0, 1) for _ in range(40)]
    b = [x + rng.gauss(0.05, 0.3) for x in a]
    t = paired_tost(a, b, 0.2)
    d = [y - x for x, y in zip(a, b)]
    lower = stats.ttest_1samp(d, -0.2, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, 0.2, alternative="less").pvalue
    assert t.p_eq == pytest.approx(max(lower, upper), rel=1e-9)
    assert t.ci90[0] < t.diff < t.ci90[1] and t.diff == pytest.approx(sum(d) / 40)
    assert (t.p_eq < 0.05) == (t.ci90[0] > -0.2 and t.ci90[1] < 0.2)


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def write_run(path, values):
    path.mkdir()
    with open(path / "records.jsonl", "w") as f:
        for i, (ll, conf) in enumerate(values):
            f.write(json.dumps({"id": str(i), "log_likelihood": ll, "confidence": conf}) + "\n")


def test_equal_runs_pass_and_a_shifted_run_fails(tmp_path, capsys):
    rng = random.Random(1)
    base = [(rng.gauss(-0.5, 0.1), rng.gauss(-1.0, 0.2)) for _ in range(60)]
    write_run(tmp_path / "a", base)
    write_run(tmp_path / "same", [(ll + rng.gauss(0, 0.005), c + rng.gauss(0, 0.01)) for ll, c in base])
    write_run(tmp_path / "biased", [(ll + 0.05, c) for ll, c in base])  # +0.5 SD in log-likelihood
    same = compare_runs(tmp_path / "a", tmp_path / "same")
    assert [t.equivalent for t in same] == [True, True] and all(t.p_holm >= t.p_eq for t in same)
    biased = {t.statistic: t for t in compare_runs(tmp_path / "a", tmp_path / "biased")}
    assert not biased["log_likelihood"].equivalent and biased["log_likelihood"].diff == pytest.approx(0.05)
    plot = tmp_path / "forest.png"
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "biased"), "--plot", str(plot)]) == 1
    out = capsys.readouterr().out
    assert "not shown equivalent" in out and plot.stat().st_size > 1000 and "not established (exit 1)" in out
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "same"), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["equivalent"] is True and [t["statistic"] for t in verdict["tests"]] == [
        "log_likelihood",
        "confidence",
    ]
    assert verdict["tests"][0]["p_holm"] == pytest.approx(same[0].p_holm) and len(verdict["tests"][0]["ci90"]) == 2
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "biased"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["equivalent"] is False
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "no records.jsonl" in capsys.readouterr().err
    assert not math.isnan(biased["confidence"].p_holm)
