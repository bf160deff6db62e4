"""Keyed randomness: deterministic per decision identity, distinct across decisions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from presto_sgl.chain.keys import ChainKeys, randbelow, uniform01

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on


def test_same_identity_same_draws_and_distinct_otherwise():
    k = ChainKeys(run_seed=5, prompt_id="p1")
    assert k.decision(1, "01") == ChainKeys(5, "p1").decision(1, "01")
    ids = [(s, d) for s in (1, 2) for d in ("", "0", "1", "01", 0, 1, 2)]
    draws = [k.decision(s, d) for s, d in ids]
    assert len({d.seed for d in draws}) == len(ids)
    assert len({d.uniform for d in draws}) == len(ids)
    assert k.decision(1, 0) != ChainKeys(6, "p1").decision(1, 0) != ChainKeys(5, "p2").decision(1, 0)
    assert k.extension_seed(1) != k.extension_seed(2)


def test_uniforms_and_cuts_are_uniform():
    u = np.array([uniform01(i) for i in range(20000)])
    assert u.min() > 0 and u.max() <= 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    cuts = np.bincount([randbelow(i, 7) for i in range(14000)], minlength=7)
    assert stats.chisquare(cuts).pvalue > 1e-3
