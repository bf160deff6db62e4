"""The inverse-CDF sampler that ``--cdf-sampling`` installs on an SGLang server
(presto_sgl/server_side/sglang/cpu/sampling.py): the right token for hand-picked uniforms, never a
zero-probability token, and the categorical law over many draws."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from presto_sgl.server_side.sglang.cpu.sampling import inverse_cdf, sampling_from_probs  # noqa: E402


def test_hand_picked_uniforms():
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3]] * 6)
    u = torch.tensor([0.0, 0.1, 0.2, 0.69, 0.71, 0.999999], dtype=torch.float64)
    assert inverse_cdf(probs, u).tolist() == [0, 0, 2, 2, 3, 3]
    unnormalized = probs * 7.0  # a row's total need not be 1
    assert inverse_cdf(unnormalized, u).tolist() == [0, 0, 2, 2, 3, 3]


def test_the_law_of_many_draws():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(50, generator=g) * 2, -1)
    p[7] = 0.0
    n = 200_000
    draws = inverse_cdf(p.expand(n, -1), torch.rand(n, generator=g))
    freq = torch.bincount(draws, minlength=50).double() / n
    assert freq[7] == 0
    assert (freq - p / p.sum()).abs().max().item() < 4 * (0.25 / n) ** 0.5  # 4 sigma of the largest


def test_seeded_requests_keep_sglangs_path():
    calls = []
    probs = torch.tensor([[0.5, 0.5]])
    sampling_from_probs(lambda *a, **k: calls.append(k) or "sglang", probs, sampling_seed=torch.tensor([3]))
    assert len(calls) == 1
    out = sampling_from_probs(lambda *a, **k: None, probs)
    assert out.dtype == torch.int32 and out.shape == (1,)
