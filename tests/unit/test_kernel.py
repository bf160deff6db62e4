"""Layer 1: the acceptance formula (paper Eq. 6) and the MH decision."""

from __future__ import annotations

import math

import numpy as np
import pytest

from presto_sgl import ChainState, EngineError, accepts, log_acceptance, mh_step
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.kernels import Proposal

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on

INF = math.inf


@pytest.mark.parametrize(
    "lq_x, lq_y, lp_x, lp_y, alpha, expected",
    [
        (-1.0, -2.0, -1.0, -2.0, 2.0, -1.0),  # (−1+2) + 2(−2+1) = −1
        (-2.0, -1.0, -3.0, -2.5, 4.0, 0.0),  # (−2+1) + 4(0.5) = 1 → min(0, 1)
        (-5.0, -0.5, -4.0, -4.0, 4.0, -4.5),  # pure proposal term
        (-0.5, -0.5, -1.0, -2.0, 3.0, -3.0),  # pure target term
        (-1.0, -1.0, -1.0, -1.0, 4.0, 0.0),  # identical suffix scores
    ],
)
def test_hand_computed_cases(lq_x, lq_y, lp_x, lp_y, alpha, expected):
    assert log_acceptance(lq_x, lq_y, lp_x, lp_y, alpha) == pytest.approx(expected, abs=1e-15)


def test_infinite_cases():
    assert log_acceptance(-1.0, -1.0, -1.0, -INF, 4.0) == -INF  # proposal impossible under p0
    assert log_acceptance(-1.0, -1.0, -INF, -1.0, 4.0) == 0.0  # leave an impossible state
    assert log_acceptance(-INF, -1.0, -1.0, -1.0, 4.0) == -INF  # reverse move impossible
    assert log_acceptance(-INF, -1.0, -INF, -INF, 4.0) == -INF  # both impossible: stay


@pytest.mark.parametrize(
    "bad", [(math.nan, -1, -1, -1), (-1, math.nan, -1, -1), (-1, -1, math.nan, -1), (-1, -1, -1, math.nan)]
)
def test_nan_is_an_engine_error_not_an_accept(bad):
    with pytest.raises(EngineError, match="finite or -inf"):
        log_acceptance(*bad, 4.0)


def test_plus_inf_and_unsampleable_proposals_are_engine_errors():
    with pytest.raises(EngineError):
        log_acceptance(INF, -1.0, -1.0, -1.0, 4.0)
    with pytest.raises(EngineError, match="could not have sampled"):
        log_acceptance(-1.0, -INF, -1.0, -1.0, 4.0)


def test_accepts_is_u_le_A():
    assert accepts(0.0, 1.0)  # A = 1 always accepts (u <= 1)
    assert not accepts(-INF, 2.0**-53)  # A = 0 never accepts (u > 0)
    a = math.log(0.3)
    assert accepts(a, 0.3 - 1e-12) and accepts(a, math.exp(a)) and not accepts(a, 0.3 + 1e-12)


def test_mh_step_accept_and_reject():
    x = ChainState((7,), (1, 2, 3), (-1.0, -1.0, -1.0), (-2.0, -2.0, -2.0))
    good = Proposal(1, (5, 6), (-1.0, -1.0), (-0.5, -0.5))  # log A = min(0, 0 + 4*3) = 0
    y, tr = mh_step(x, good, 4.0, 1.0)
    assert tr.accepted and tr.log_accept == 0.0 and tr.cut == 1
    assert y == ChainState((7,), (1, 5, 6), (-1.0, -1.0, -1.0), (-2.0, -0.5, -0.5))
    bad = Proposal(1, (5, 6), (-1.0, -1.0), (-9.0, -9.0))  # log A = 4*(−18+4) = −56
    z, tr = mh_step(x, bad, 4.0, 1e-6)
    assert not tr.accepted and tr.log_accept == pytest.approx(-56.0) and z is x
    # unequal proposal terms: log A = alpha (lp_y - lp_x) + lq_x - lq_y = 4 (-5.25 + 4) + (-2 + 6) = -1
    asym = Proposal(1, (5, 6), (-3.0, -3.0), (-2.625, -2.625))
    _, tr = mh_step(x, asym, 4.0, 0.5)
    assert tr.log_accept == pytest.approx(-1.0) and not tr.accepted  # log 0.5 > -1
    assert mh_step(x, asym, 4.0, 0.3)[1].accepted  # log 0.3 < -1
    with pytest.raises(EngineError, match="expected 2"):
        mh_step(x, Proposal(1, (5,), (-1.0,), (-1.0,)), 4.0, 0.5)


def test_tau_one_over_alpha_identity():
    """With tau = 1/alpha: alpha log p0(t) - log q(t) = log sum_u p0(u|ctx)^alpha (context only)."""
    lm = ReferenceLM(9, sharpness=1.5, seed=4)
    alpha = 4.0
    for ctx in [(0,), (1, 2), (3, 4, 5, 6)]:
        logp, logq, _ = lm.distribution(ctx, 1.0 / alpha)
        lhs = alpha * logp - logq
        rhs = np.logaddexp.reduce(alpha * logp)
        assert np.allclose(lhs, rhs, atol=1e-12)
