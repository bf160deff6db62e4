"""Batched CPU attention for SGLang's ``torch_native`` backend (server side, opt-in).

SGLang 0.5.23's ``TorchNativeAttnBackend`` runs one scaled-dot-product attention per request
per layer in a Python loop, in decode and in extend: a call of N forks pays N x layers small
kernels per step. These replacements do the whole batch in a few tensor operations: gather
every request's KV through SGLang's request-to-token map into a padded block
[R, L_max], mask the padding (and, in extend, the future), and run one masked SDPA.

The plugin (:mod:`.plugin`) installs them as AROUND hooks on
``TorchNativeAttnBackend._run_sdpa_forward_decode`` / ``_run_sdpa_forward_extend`` when
``PRESTO_SGL_BATCHED_ATTENTION=1`` (``scripts/sglang_server.sh start --batched-attention``).
Sliding-window layers (Gemma 3: 15 of 18) are masked as the original masks them: a query at
position p sees keys p - w .. p, where w is the layer's ``sliding_window_size`` (the
model's window minus one). Cases they do not cover (encoder lengths, cross attention,
non-causal extend) go to the original. Imported only in the server's processes.
"""

from __future__ import annotations

from typing import Any

BACKEND = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend"


def _kv_block(k_cache: Any, v_cache: Any, req_to_token: Any, req_pool_indices: Any, seq_lens: Any, dtype: Any):
    """Padded keys and values [R, H_kv, L_max, D] of every request, and the valid mask [R, L_max]."""
    import torch

    lmax = int(seq_lens.max())
    valid = torch.arange(lmax, device=seq_lens.device)[None, :] < seq_lens[:, None]
    idx = torch.where(valid, req_to_token[req_pool_indices, :lmax], 0).long()
    k = k_cache[idx].transpose(1, 2)
    v = v_cache[idx].transpose(1, 2)
    if k.dtype != dtype:
        k, v = k.to(dtype), v.to(dtype)
    return k, v, valid


def _unsupported(encoder_lens: Any, is_cross_attn: bool) -> bool:
    return encoder_lens is not None or is_cross_attn


def _window(sliding_window_size: Any) -> int | None:
    """The keys before a query that a sliding-window layer sees (None: every key)."""
    return int(sliding_window_size) if sliding_window_size is not None and sliding_window_size > -1 else None


def decode(
    original: Any,
    backend: Any,
    query: Any,
    output: Any,
    k_cache: Any,
    v_cache: Any,
    req_to_token: Any,
    req_pool_indices: Any,
    seq_lens: Any,
    encoder_lens: Any = None,
    scaling: Any = None,
    enable_gqa: bool = False,
    causal: bool = False,
    is_cross_attn: bool = False,
    sliding_window_size: Any = None,
) -> Any:
    """query, output: [R, H, D] (one new token per request). One request: the original (no padding)."""
    if _unsupported(encoder_lens, is_cross_attn) or seq_lens.shape[0] <= 1:
        return original(
            backend,
            query,
            output,
            k_cache,
            v_cache,
            req_to_token,
            req_pool_indices,
            seq_lens,
            encoder_lens,
            scaling,
            enable_gqa,
            causal,
            is_cross_attn,
            sliding_window_size,
        )
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    k, v, valid = _kv_block(k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, query.dtype)
    window = _window(sliding_window_size)
    if window is not None:  # the query sits at position seq_len - 1
        kpos = torch.arange(k.shape[2], device=query.device)[None, :]
        valid = valid & (kpos >= (seq_lens[:, None] - 1 - window))
    q = query.unsqueeze(2)  # [R, H, 1, D]
    out = scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :], scale=scaling, enable_gqa=enable_gqa)
    output.copy_(out.squeeze(2))
    return output


def extend(
    original: Any,
    backend: Any,
    query: Any,
    output: Any,
    k_cache: Any,
    v_cache: Any,
    req_to_token: Any,
    req_pool_indices: Any,
    seq_lens: Any,
    extend_prefix_lens: Any,
    extend_seq_lens: Any,
    encoder_lens: Any = None,
    scaling: Any = None,
    enable_gqa: bool = False,
    causal: bool = False,
    is_cross_attn: bool = False,
    sliding_window_size: Any = None,
) -> Any:
    """query, output: [sum of extend lengths, H, D], requests one after another."""
    if _unsupported(encoder_lens, is_cross_attn) or not causal or seq_lens.shape[0] <= 1:
        return original(
            backend,
            query,
            output,
            k_cache,
            v_cache,
            req_to_token,
            req_pool_indices,
            seq_lens,
            extend_prefix_lens,
            extend_seq_lens,
            encoder_lens,
            scaling,
            enable_gqa,
            causal,
            is_cross_attn,
            sliding_window_size,
        )
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    q_lens = extend_seq_lens.long()
    qmax = int(q_lens.max())
    if qmax == 0:
        return output
    k, v, valid = _kv_block(k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, query.dtype)
    pos = torch.arange(qmax, device=query.device)[None, :]
    q_valid = pos < q_lens[:, None]  # [R, Q_max]
    rows = ((torch.cumsum(q_lens, 0) - q_lens)[:, None] + pos).clamp(max=query.shape[0] - 1)
    q = query[rows].transpose(1, 2)  # [R, H, Q_max, D]
    absolute = extend_prefix_lens.long()[:, None] + pos  # each query token's position in its sequence
    kpos = torch.arange(k.shape[2], device=query.device)
    mask = (kpos[None, None, :] <= absolute[:, :, None]) & valid[:, None, :]  # causal, within the sequence
    window = _window(sliding_window_size)
    if window is not None:
        mask &= kpos[None, None, :] >= absolute[:, :, None] - window
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=scaling, enable_gqa=enable_gqa)
    output[rows[q_valid]] = out.transpose(1, 2)[q_valid]
    return output


def register() -> None:
    """Install both hooks (called by the plugin in each SGLang process when its variable enables
    it: :mod:`presto_sgl.server_side.sglang.cpu`)."""
    from sglang.srt.plugins.hook_registry import HookType

    from ..hooks import register_all

    register_all(
        [
            (BACKEND + "._run_sdpa_forward_decode", decode, HookType.AROUND),
            (BACKEND + "._run_sdpa_forward_extend", extend, HookType.AROUND),
        ]
    )
