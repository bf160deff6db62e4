"""presto-sgl's stand-in for ``sgl_kernel`` on CPU-only machines.

SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) uses the CPU kernels of a source-built
``sgl_kernel`` when that module registers ``torch.ops.sgl_kernel.convert_weight_packed``
(Intel AMX), and its pure-PyTorch paths otherwise. PyPI has no CPU build of it. This
stub registers no torch ops, so SGLang takes the pure-PyTorch paths.

SGLang 0.5.23 still imports eight CPU kernels by name when its modules load (all for
speculative decoding or KV-cache moves, which presto-sgl's server use does not reach).
They are defined here as functions that raise ``NotImplementedError`` when called.
"""

__version__ = "0.0.0+presto.stub"
PRESTO_SGL_STUB = True

_IMPORTED_BY_SGLANG_0_5_23_CPU = (
    "copy_all_layer_kv_cache_cpu",  # sglang/kernels/ops/kvcache/cache_move.py
    "assign_req_to_token_pool_cpu",  # sglang/srt/mem_cache/allocation.py (spec decode)
    "build_tree_kernel_efficient_cpu",  # sglang/kernels/ops/speculative/spec_tree.py
    "verify_tree_greedy_cpu",  # sglang/kernels/ops/speculative/spec_tree.py
    "assign_draft_cache_locs_contiguous_cpu",  # sglang/kernels/ops/speculative/cache_locs.py
    "assign_extend_cache_locs_cpu",  # sglang/kernels/ops/speculative/cache_locs.py
    "fill_accept_out_cache_loc_cpu",  # sglang/kernels/ops/speculative/eagle.py
    "fill_bonus_tokens_cpu",  # sglang/kernels/ops/speculative/eagle.py
)


def _unavailable(name):
    def kernel(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name}: CPU kernel not available (presto-sgl's sgl_kernel stub; "
            "build sgl-kernel from source for SGLang's CPU kernels)"
        )

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


for _name in _IMPORTED_BY_SGLANG_0_5_23_CPU:
    globals()[_name] = _unavailable(_name)
del _name

__all__ = list(_IMPORTED_BY_SGLANG_0_5_23_CPU)
