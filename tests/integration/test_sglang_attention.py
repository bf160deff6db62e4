"""presto-sgl's batched CPU attention (``presto_sgl/server_side/sglang/cpu/attention.py``) against SGLang's
own ``torch_native`` backend, on the same KV pool, float32: decode and extend, ragged
batches, prefixes, shared pool slots, grouped-query heads, and sliding-window layers (Gemma 3's:
the window ends inside some rows and beyond others). Needs sglang (run by
``scripts/test.sh`` with ``.venv-sglang``'s python; skipped elsewhere).
"""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

from presto_sgl.server_side.sglang.cpu import attention  # noqa: E402


def _native():
    """SGLang's backend, imported only when a test runs: importing ``sglang.srt`` at collection
    would fix SGLang's CPU-engine check before the in-process tests of the same run set it."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend


H, HKV, D = 9, 3, 64  # SmolLM2-135M: 9 query heads, 3 KV heads


def _pool(seq_lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    slots = 600
    k_cache = torch.randn(slots, HKV, D, generator=g)
    v_cache = torch.randn(slots, HKV, D, generator=g)
    req_to_token = torch.randint(0, slots, (16, 256), generator=g, dtype=torch.int32)
    req_to_token[3, :40] = req_to_token[5, :40]  # two forks sharing a prefix's slots
    req_pool_indices = torch.tensor([5, 3, 9, 0, 12][: len(seq_lens)])
    return k_cache, v_cache, req_to_token, req_pool_indices, torch.tensor(seq_lens), g


WINDOWS = [None, 9]  # no window; Gemma 3's sliding layers (window w = 10 keys: sliding_window_size 9)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("seq_lens", [[7, 41, 1, 120, 12], [64], [3, 3]])
def test_batched_decode_matches_torch_native(seq_lens, window):
    k_cache, v_cache, r2t, idx, lens, g = _pool(seq_lens)
    q = torch.randn(len(seq_lens), H, D, generator=g)
    native = _native()  # its static mask helper is reached through `self`
    want = native._run_sdpa_forward_decode(
        native, q, torch.empty_like(q), k_cache, v_cache, r2t, idx, lens, None, 0.125, True, False, False, window
    )
    got = attention.decode(
        native._run_sdpa_forward_decode,
        native,
        q,
        torch.empty_like(q),
        k_cache,
        v_cache,
        r2t,
        idx,
        lens,
        None,
        0.125,
        True,
        False,
        False,
        window,
    )
    assert (got - want).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "seq_lens,prefix_lens", [([7, 41, 1, 120, 12], [0, 40, 0, 100, 11]), ([30, 30], [29, 0]), ([5], [0])]
)
@pytest.mark.parametrize("window", WINDOWS)
def test_batched_extend_matches_torch_native(seq_lens, prefix_lens, window):
    k_cache, v_cache, r2t, idx, lens, g = _pool(seq_lens, seed=1)
    prefix = torch.tensor(prefix_lens)
    ext = lens - prefix
    q = torch.randn(int(ext.sum()), H, D, generator=g)
    args = (k_cache, v_cache, r2t, idx, lens, prefix, ext, None, 0.125, True, True, False, window)
    native = _native()
    want = native._run_sdpa_forward_extend(native, q, torch.empty_like(q), *args)
    got = attention.extend(native._run_sdpa_forward_extend, native, q, torch.empty_like(q), *args)
    assert (got - want).abs().max().item() < 1e-5


def test_unsupported_cases_go_to_the_original():
    calls = []
    attention.decode(lambda *a: calls.append(a) or "orig", None, *([None] * 7), is_cross_attn=True)
    assert len(calls) == 1
