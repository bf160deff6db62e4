"""The row statistics both server plugins compute (presto_sgl/server_side/rowstats.py), against a
float64 reference written out per row, and the per-request ask they are computed for."""

from __future__ import annotations

import math

import pytest
import torch

from presto_sgl import wire
from presto_sgl.server_side.rowstats import Ask, Plan, ask_of, entropy, fields, log_p0, masked_lognorm


def _reference(logits_row, masked_row, token, temperature, temps):
    """(log p0(s), log q_T(s) over the allowed tokens, H(p0), Z_t per t) in float64, per token."""
    x = [float(v) for v in logits_row]
    top = max(v for v in x if v != -math.inf)
    z = math.log(sum(math.exp(v - top) for v in x if v != -math.inf)) + top
    logp = [v - z for v in x]
    allowed = [lp for lp, m in zip(logp, masked_row) if not m]

    def lse(vals):
        m = max(vals)
        return m + math.log(sum(math.exp(v - m) for v in vals))

    h = -sum(math.exp(lp) * lp for lp in logp if lp != -math.inf)
    logq = logp[token] / temperature - lse([lp / temperature for lp in allowed])
    return logp[token], logq, h, [lse([lp / t for lp in allowed]) for t in temps]


def test_entropy_of_a_row_with_minus_inf_logits_is_finite_and_right():
    """A row whose model gives -inf logits (e.g. a vocabulary padding) has exp(-inf) * -inf = NaN
    terms; they count 0, as in the entropy over the finite tokens."""
    logits = torch.tensor([[2.0, -math.inf, 0.5, -math.inf, -1.0]])
    raw = torch.log_softmax(logits, -1)
    got = float(entropy(raw)[0])
    p = torch.softmax(torch.tensor([2.0, 0.5, -1.0], dtype=torch.float64), -1)
    assert math.isfinite(got) and got == pytest.approx(float(-(p * p.log()).sum()), abs=1e-6)
    assert float(entropy(torch.log_softmax(torch.tensor([[0.0, 0.0]]), -1))[0]) == pytest.approx(math.log(2))


def test_masked_lognorm_per_row_and_per_temperature():
    raw = torch.log_softmax(torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 4.0]]), -1)
    masked = torch.tensor([[False, True, False], [False, False, False]])
    per_t = masked_lognorm(raw, masked, (0.5, 1.0))
    assert per_t.shape == (2, 2)
    assert float(per_t[0, 1]) == pytest.approx(math.log(math.exp(raw[0, 0]) + math.exp(raw[0, 2])), abs=1e-6)
    assert float(per_t[1, 1]) == pytest.approx(0.0, abs=1e-6)  # nothing masked, t = 1: the row sums to 1
    per_row = masked_lognorm(raw, masked, torch.tensor([[0.5], [1.0]]))
    assert per_row.tolist() == pytest.approx([float(per_t[0, 0]), float(per_t[1, 1])], abs=1e-6)


def test_fields_compute_only_what_each_asking_row_asked_and_match_a_float64_reference():
    """A batch of 5 rows: rows 0, 2, 3 ask (log p0 only; entropy; entropy and two temperatures),
    rows 1 and 4 are other requests. Row 3 is under a mask with -inf logits, as a grammar leaves
    it. Only the asking rows are computed; each value matches the float64 reference."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 40, generator=gen) * 3
    logits[3, 10:20] = -math.inf  # the model's own -inf entries
    masked_full = torch.zeros(5, 40, dtype=torch.bool)
    masked_full[3, 30:] = True  # the grammar's: excluded from q and the normalizers, not from p0
    plan = Plan.of([Ask(), None, Ask(entropy=True), Ask(entropy=True, temperatures=(0.25, 1.0)), None])
    assert plan is not None and plan.rows == (0, 2, 3) and plan.batch_size == 5
    raw = log_p0(logits, plan)
    assert raw.shape == (3, 40)
    logits[0] += 100.0  # the server edits the logits in place after log p0 was taken: no effect
    sampled_full = torch.tensor([5, 6, 7, 8, 9])
    temperature = torch.tensor([0.7, 0.9, 1.3])
    index = plan.index("cpu")
    got = fields(raw, sampled_full.index_select(0, index), plan, masked_full.index_select(0, index), temperature)
    rows = got.rows()
    assert set(rows) == {0, 2, 3}
    originals = torch.randn(5, 40, generator=torch.Generator().manual_seed(3)) * 3
    originals[3, 10:20] = -math.inf
    for k, (i, ask) in enumerate(zip(plan.rows, plan.asks)):
        logp, logq, h, z = _reference(
            originals[i], masked_full[i], int(sampled_full[i]), float(temperature[k]), ask.temperatures
        )
        row = rows[i]
        assert row.logp == pytest.approx(logp, abs=1e-5) and row.logq == pytest.approx(logq, abs=1e-5)
        assert (row.entropy is None) == (not ask.entropy)
        if ask.entropy:
            assert math.isfinite(row.entropy) and row.entropy == pytest.approx(h, abs=1e-4)
        assert row.lognorm == pytest.approx(tuple(z), abs=1e-5)
    # without temperatures no log q_T (SGLang returns its own)
    assert all(r.logq is None for r in fields(raw, sampled_full.index_select(0, index), plan).rows().values())


def test_a_batch_without_an_asking_row_has_no_plan():
    assert Plan.of([None, None]) is None and Plan.of([]) is None


@pytest.mark.parametrize(
    ("entropy_", "temps", "text"),
    [(False, (), "|"), (True, (), "entropy|"), (True, (0.25, 0.5, 1.0), "entropy|0.25,0.5,1.0"), (False, (2,), "|2.0")],
)
def test_the_ask_round_trips(entropy_, temps, text):
    assert wire.ask(entropy_, temps) == text
    assert wire.parse_ask(text) == (entropy_, tuple(float(t) for t in temps))
    assert ask_of({wire.FIELDS_KEY: text, "presto_resume": 3}) == Ask(entropy_, tuple(float(t) for t in temps))


@pytest.mark.parametrize("bad", ["", "entropy", "e|0.5", "|0.5|1", "|0,1", "|-1", "|nan", "|inf", 5, None])
def test_a_malformed_ask_is_refused_by_name_and_asks_nothing(bad):
    with pytest.raises(ValueError, match=wire.FIELDS_KEY):
        wire.parse_ask(bad)
    assert ask_of({wire.FIELDS_KEY: bad}) is None
    assert ask_of(None) is None and ask_of({"other": 1}) is None
