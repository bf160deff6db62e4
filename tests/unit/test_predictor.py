"""The eps-certainty predictor: fit, saved form, held-out evaluation, online refits, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from presto_sgl import cli
from presto_sgl.chain.trace import metrics_from_trace, read_trace
from presto_sgl.predictor import DEFAULT_PATH, LogisticPredictor, OnlinePredictor, load_predictor
from presto_sgl.predictor.certainty import ACCEPT, REJECT, UNCERTAIN, Observation, h_plus
from presto_sgl.predictor.evaluation import cross_validate, group_folds, load_observations, observations_from_trace
from presto_sgl.predictor.fitting import fit_logistic
from presto_sgl.predictor.model import FORMAT, design
from presto_sgl.predictor.online import _newton_refit

GRID = np.linspace(0.0, 1.0, 41)


def synthetic(n: int, coef, intercept, seed: int = 0, groups: int = 10) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Cut fractions ~ U(0, 1) and classes drawn from the logistic law softmax(b + W x)."""
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    z = x[:, None] * np.asarray(coef, dtype=float)[:, 0] + np.asarray(intercept, dtype=float)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return x, y, [f"prompt-{i % groups}" for i in range(n)]


TRUE_COEF, TRUE_INTERCEPT = [[-3.0], [0.0], [2.0]], [1.5, -0.5, -1.0]


@pytest.fixture(scope="module")
def fitted() -> LogisticPredictor:
    x, y, _ = synthetic(4000, TRUE_COEF, TRUE_INTERCEPT)
    return fit_logistic(x, y, ["cut_fraction", "cut_fraction_sq"], training={"note": "synthetic"})


# -- fit and saved form ---------------------------------------------------------------
def test_fit_recovers_a_known_logistic_law():
    x, y, _ = synthetic(20000, TRUE_COEF, TRUE_INTERCEPT, seed=1)
    model = fit_logistic(x, y)
    truth = LogisticPredictor(["cut_fraction"], TRUE_COEF, TRUE_INTERCEPT)
    assert np.max(np.abs(model.proba_many(GRID) - truth.proba_many(GRID))) < 0.03
    # softmax is shift-invariant: compare the coefficients centered over the classes
    c, true = np.array(model.coef)[:, 0], np.array(TRUE_COEF)[:, 0]
    assert np.allclose(c - c.mean(), true - true.mean(), atol=0.25)


def test_saved_form_round_trips_exactly(fitted, tmp_path):
    path = tmp_path / "p.json"
    fitted.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["classes"] == ["reject", "uncertain", "accept"] and data["eps"] == 0.01
    assert data["training"] == {"note": "synthetic"}
    loaded = LogisticPredictor.load(path)
    assert loaded.to_json() == fitted.to_json()
    assert [loaded.proba(float(v)) for v in GRID] == [fitted.proba(float(v)) for v in GRID]
    assert np.array_equal(loaded.proba_many(GRID), fitted.proba_many(GRID))


def test_scalar_and_vector_paths_agree_and_are_valid(fitted):
    many = fitted.proba_many(GRID)
    one = np.array([fitted.proba(float(v)) for v in GRID])
    assert np.allclose(one, many, rtol=0, atol=1e-12)
    assert np.all(many > 0) and np.allclose(many.sum(axis=1), 1.0)
    assert 0.0 < h_plus(fitted, 0.5) < 1.0
    with pytest.raises(ValueError, match="cut_fraction"):
        fitted.proba(1.5)
    with pytest.raises(ValueError, match="features"):
        design([0.5], ["log_length"])


def test_fit_needs_all_three_classes():
    with pytest.raises(ValueError, match=r"none are \['uncertain'\]"):
        fit_logistic([0.1, 0.5, 0.9, 0.3], [REJECT, ACCEPT, REJECT, ACCEPT])


# -- held-out evaluation ------------------------------------------------------------
def test_cv_splits_never_share_a_prompt():
    _, _, groups = synthetic(500, TRUE_COEF, TRUE_INTERCEPT, groups=13)
    splits = group_folds(groups, 5)
    assert len(splits) == 5
    tested = np.concatenate([test for _, test in splits])
    assert sorted(tested.tolist()) == list(range(500))  # every decision held out exactly once
    for train, test in splits:
        assert not {groups[i] for i in train} & {groups[i] for i in test}
    with pytest.raises(ValueError, match=r"`folds` \(=14\) exceeds the number of prompts in the traces \(13\)"):
        group_folds(groups, 14)


def test_cross_validation_beats_the_prior_on_an_informative_law():
    x, y, groups = synthetic(3000, TRUE_COEF, TRUE_INTERCEPT, seed=2)
    ev = cross_validate([Observation(float(a), int(b), g) for a, b, g in zip(x, y, groups)], folds=5)
    assert ev.examples == 3000 and ev.groups == 10 and sum(ev.class_counts) == 3000
    assert ev.log_loss < ev.prior_log_loss and ev.accuracy >= ev.prior_accuracy
    assert sum(ev.shares) == pytest.approx(1.0)


# -- online refits ------------------------------------------------------------------
def test_newton_refit_matches_scikit_learn(fitted):
    x, y, _ = synthetic(800, [[1.0], [0.0], [-1.0]], [0.0, 0.5, 0.0], seed=3)
    w = np.linspace(0.2, 2.0, len(x))
    features = ["cut_fraction", "cut_fraction_sq"]
    reference = fit_logistic(x, y, features, sample_weight=w)
    newton = _newton_refit(design(x, features), y, w, 1.0, fitted, {})
    assert np.allclose(newton.proba_many(GRID), reference.proba_many(GRID), atol=1e-6)


def test_online_refits_toward_observed_decisions():
    base = LogisticPredictor(["cut_fraction"], [[0.0], [0.0], [0.0]], [2.0, 0.0, -2.0])  # mostly reject
    online = OnlinePredictor(base, prior_weight=20, min_examples=10)
    online.observe([Observation(0.5, ACCEPT)] * 9)
    assert online.refits == 0 and online.proba(0.5) == base.proba(0.5)  # too few examples
    online.observe([Observation(0.5, ACCEPT)])
    assert online.refits == 0  # one class only
    before = online.proba(0.3)[ACCEPT]
    rng = np.random.default_rng(4)
    for _ in range(10):  # rounds of mostly-accept decisions
        online.observe([Observation(float(v), ACCEPT if v > 0.1 else UNCERTAIN) for v in rng.random(8)])
    assert online.refits == 10 and online.refit_time_s > 0
    for v in GRID:
        p = online.proba(float(v))
        assert all(0 < q < 1 for q in p) and math.isclose(sum(p), 1.0)
    after = online.proba(0.3)
    assert after[ACCEPT] > max(after[REJECT], 0.5) > before
    assert base.proba(0.3)[REJECT] > 0.8  # the base itself is unchanged


def test_online_prior_weight_keeps_early_refits_near_the_base():
    base = LogisticPredictor(["cut_fraction"], [[0.0], [0.0], [0.0]], [2.0, 0.0, -2.0])
    decisions = [Observation(0.2, ACCEPT)] * 6 + [Observation(0.8, UNCERTAIN)] * 6
    moves = []
    for weight in (1.0, 1000.0):
        online = OnlinePredictor(base, prior_weight=weight)
        online.observe(decisions)
        moves.append(abs(online.proba(0.2)[ACCEPT] - base.proba(0.2)[ACCEPT]))
    assert moves[1] < 0.05 < moves[0]
    with pytest.raises(ValueError, match="prior_weight"):
        OnlinePredictor(base, prior_weight=0)


# -- loading ------------------------------------------------------------------------
def test_shipped_default_loads():
    default = load_predictor("default")
    assert isinstance(default, LogisticPredictor) and DEFAULT_PATH.exists()
    cv = default.training["cross_validation"]
    assert cv["log_loss"] < cv["prior_log_loss"]
    p = default.proba(0.5)
    assert math.isclose(sum(p), 1.0) and min(p) > 0
    online = load_predictor("default", online=True)
    assert isinstance(online, OnlinePredictor) and online.proba(0.5) == p


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "does not exist; pass 'default' or a file written by `presto-sgl fit-predictor"),
        ("{not json", "is not JSON"),
        ('{"format": "other"}', "is not a saved eps-certainty predictor"),
        (
            json.dumps(
                {
                    "format": FORMAT,
                    "version": 1,
                    "classes": ["reject", "uncertain", "accept"],
                    "eps": 0.01,
                    "features": ["cut_fraction"],
                    "coef": [[1.0]],
                    "intercept": [0, 0, 0],
                }
            ),
            "3 rows",
        ),
        (json.dumps({"format": FORMAT, "version": 1, "classes": ["reject", "uncertain", "accept"]}), "missing field"),
    ],
)
def test_load_predictor_errors_name_the_file_and_the_fix(tmp_path, content, match):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=match) as info:
        load_predictor(str(path))
    assert str(path) in str(info.value) and str(info.value).startswith("`predictor`")


# -- traces and the command line -----------------------------------------------------
RUN = [
    "sample",
    "--engine",
    "reference",
    "--prompt",
    "the cat",
    "--rule",
    "sequential",
    "--keying",
    "path",
    "--max-new-tokens",
    "32",
    "--block-size",
    "16",
    "--steps",
    "12",
    "--json",
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[str]:
    """Short reference-engine runs, one trace per prompt id."""
    folder = tmp_path_factory.mktemp("traces")
    paths = []
    for i in range(4):
        path = folder / f"t{i}.jsonl"
        assert cli.main([*RUN, "--prompt-id", str(i), "--seed", str(i), "--trace", str(path)]) == 0
        paths.append(str(path))
    return paths


def test_nodes_carry_the_stage_length_and_old_traces_still_read(traces, tmp_path):
    with open(traces[0]) as stream:
        records = read_trace(stream)
    nodes = [r for r in records if r["type"] == "node"]
    assert [n["length"] for n in nodes] == [16] * 12 + [32] * 12
    obs = observations_from_trace(records)
    assert [o.cut_fraction for o in obs] == [n["cut"] / n["length"] for n in nodes] and {o.group for o in obs} == {"0"}
    old = [{k: v for k, v in r.items() if k != "length"} for r in records]  # a trace from before `length`
    assert observations_from_trace(old) == obs
    assert metrics_from_trace(old) == metrics_from_trace(records)


def test_fit_and_eval_predictor_commands(traces, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "fitted.json"
    assert cli.main(["fit-predictor", *traces, "-o", str(out), "--folds", "2", "--note", "reference LM"]) == 0
    text = capsys.readouterr().out
    assert "decisions 96 from 4 prompts" in text and "2-fold CV" in text and f"saved {out}" in text
    saved = LogisticPredictor.load(out)
    assert saved.training["note"] == "reference LM" and saved.training["examples"] == 96
    assert saved.training["settings"][0]["rule"] == "sequential"
    assert saved.training["cross_validation"]["folds"] == 2
    assert cli.main(["eval-predictor", *traces, "--folds", "2", "--predictor", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decisions"] == 96 and data["prompts"] == 4 and sum(data["shares"].values()) == pytest.approx(1.0)
    assert data["cross_validation"]["folds"] == 2 and data["predictor"]["spec"] == str(out)
    assert data["predictor"]["examples"] == 96
    assert cli.main(["eval-predictor", *traces, "--folds", "0"]) == 0
    assert "eps-certain" in capsys.readouterr().out
    loaded = load_observations(traces)
    assert len(loaded) == 96 and len({o.group for o in loaded}) == 4


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["eval-predictor", "MISSING.jsonl"], "MISSING.jsonl"),
        (["eval-predictor", "TRACE0", "--folds", "5"], "--folds"),
        (["eval-predictor", "TRACE0", "--folds", "0", "--predictor", "nope.json"], "--predictor"),
        (["fit-predictor", "TRACE0", "-o", "/nonexistent/dir/p.json", "--folds", "0"], "--output"),
        (["sample", "--engine", "reference", "--prompt", "hi", "--rule", "sequential", "--cost-aware"], "--cost-aware"),
        (
            ["sample", "--engine", "reference", "--prompt", "hi", "--rule", "predictive", "--predictor", "nope.json"],
            "--predictor",
        ),
        (["eval-predictor", "TRACE0", "--features", "cut_fraction,log_length"], "--features"),
    ],
)
def test_bad_predictor_input_returns_2(traces, capsys, argv, named):
    argv = [traces[0] if a == "TRACE0" else a for a in argv]
    capsys.readouterr()
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "error:" in err and named in err and "Traceback" not in err


def test_sample_passes_predictor_flags_into_the_config(capsys, tmp_path):
    capsys.readouterr()
    assert (
        cli.main(
            [
                "sample",
                "--engine",
                "reference",
                "--prompt",
                "hi",
                "--max-new-tokens",
                "16",
                "--steps",
                "2",
                "--json",
                "--predictor",
                str(DEFAULT_PATH),
                "--online-predictor",
            ]
        )
        == 0
    )
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["predictor"] == str(DEFAULT_PATH) and config["online"] is True and config["cost_aware"] is False
