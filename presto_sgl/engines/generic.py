"""Any transformers causal LM, run over the embedded engine's position-addressed KV buffers.

The model's own ``forward`` does the work (its attention, its rotary and sliding-window
variants, its norms and logit soft-capping); only the cache object is ours. A
:class:`BufferCache` is a transformers ``Cache`` whose layers write each new key/value at
its absolute position into the engine's :class:`~.forward.KVBuffers` and hand the model
every position before it. The model then builds its own masks (causal, sliding-window,
per layer type) from absolute positions, so forks of one sequence at different cuts decode
position-synchronously exactly as on the Llama fast path (:mod:`.forward`), with the
radix tree's prefix KV reused.

A model whose cache is not one key/value pair per layer of a common shape (state-space and
linear-attention layers, KV shared across layers, per-layer head sizes) is refused at
construction, by a probe that also checks this path against the model's plain forward.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache

from .forward import KVBuffers

PROBE_TOLERANCE = 1e-3  # probe logits vs the plain forward (float32: ~1e-5; bf16 models are looser)


class BufferLayer(CacheLayerMixin):
    """One layer's KV in a buffer [rows, kv_heads, length, head_dim]: a forward at ``start``
    writes its S new positions at start..start+S-1 and attends over positions 0..start+S-1."""

    is_sliding = False  # the model masks its sliding layers itself, from absolute positions

    def __init__(self, k: torch.Tensor, v: torch.Tensor, start: int) -> None:
        super().__init__()
        self.k, self.v, self.start = k, v, start
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.start + key_states.shape[-2]
        self.k[:, :, self.start : end] = key_states
        self.v[:, :, self.start : end] = value_states
        return self.k[:, :, :end], self.v[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.start + query_length, 0  # (kv length, kv offset): every position from 0

    def get_seq_length(self) -> int:
        return self.start

    def get_max_length(self) -> int:
        return self.k.shape[2]


class BufferCache(Cache):
    """A transformers ``Cache`` over :class:`KVBuffers`: one :class:`BufferLayer` per layer."""

    def __init__(self, bufs: KVBuffers, start: int) -> None:
        super().__init__(layers=[BufferLayer(k, v, start) for k, v in zip(bufs.k, bufs.v)])


class GenericCausalLM:
    """The embedded engine's forward (see :class:`~.forward.CausalLM`) through the model's own
    ``forward``, for any transformers causal LM whose cache is one key/value pair per layer."""

    def __init__(self, hf_model: Any) -> None:
        cfg = hf_model.config
        self.hf_model = hf_model.eval()
        self.config = cfg
        self.model_type: str = getattr(cfg, "model_type", type(hf_model).__name__)
        self.vocab_size: int = int(cfg.vocab_size)
        self.max_positions: int = int(getattr(cfg, "max_position_embeddings", None) or 1 << 20)
        self.dtype: torch.dtype = next(hf_model.parameters()).dtype
        self.device: torch.device = next(hf_model.parameters()).device
        self.n_layers, self.n_kv_heads, self.head_dim = self._kv_shape()
        self._check_against_plain_forward()

    def _refuse(self, why: str) -> ValueError:
        return ValueError(
            f"model type {self.model_type!r} is not supported by the embedded engine: {why}; "
            "serve it with SGLang or vLLM and use --engine sglang / --engine vllm"
        )

    def _probe_ids(self, n: int) -> torch.Tensor:
        bos = getattr(self.config, "bos_token_id", None)
        first = bos if isinstance(bos, int) and 0 <= bos < self.vocab_size else 0
        ids = [first] + [(7 * i + 11) % self.vocab_size for i in range(n - 1)]
        return torch.tensor([ids], device=self.device)

    def _kv_shape(self) -> tuple[int, int, int]:
        """(layers, kv heads, head dim) read from the model's own cache after a 2-token forward."""
        cache = DynamicCache(config=self.config)
        try:
            with torch.inference_mode():
                self.hf_model(input_ids=self._probe_ids(2), past_key_values=cache, use_cache=True)
        except Exception as exc:  # any model-specific refusal of the probe
            raise self._refuse(f"its forward refused a cached 2-token probe ({type(exc).__name__}: {exc})") from None
        layers = list(getattr(cache, "layers", []))
        shapes = set()
        for layer in layers:
            keys = getattr(layer, "keys", None)
            if not isinstance(layer, CacheLayerMixin) or keys is None or keys.dim() != 4:
                raise self._refuse(f"its cache holds {type(layer).__name__} layers, not key/value pairs")
            if layer.values is None or layer.values.shape != keys.shape:
                raise self._refuse("its keys and values differ in shape")
            shapes.add((keys.shape[1], keys.shape[3]))
        n_hidden = getattr(self.config, "num_hidden_layers", len(layers))
        if not layers or len(layers) != n_hidden:
            raise self._refuse(f"its cache has {len(layers)} layers for {n_hidden} decoder layers (shared KV)")
        if len(shapes) != 1:
            raise self._refuse(f"its layers' KV shapes differ ({sorted(shapes)})")
        ((heads, dim),) = shapes
        return len(layers), int(heads), int(dim)

    def _check_against_plain_forward(self) -> None:
        """Prefill 3 tokens into buffers, decode 1: its logits must be the plain forward's."""
        ids = self._probe_ids(4)
        bufs = self.new_buffers(1, 4)
        self.forward(ids[:, :3], 0, bufs)
        got = self.forward(ids[:, 3:], 3, bufs)
        with torch.inference_mode():
            want = self.hf_model(input_ids=ids, use_cache=False).logits[:, -1].float()
        err = float((got - want).abs().max())
        if not err <= PROBE_TOLERANCE * max(1.0, float(want.abs().max())):
            raise self._refuse(f"decoding over position-addressed KV differs from its plain forward by {err:.3g}")

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * torch.finfo(self.dtype).bits // 8

    def new_buffers(self, rows: int, length: int) -> KVBuffers:
        shape = (rows, self.n_kv_heads, length, self.head_dim)
        mk = lambda: torch.empty(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return KVBuffers([mk() for _ in range(self.n_layers)], [mk() for _ in range(self.n_layers)])

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: int, bufs: KVBuffers, *, all_logits: bool = False) -> torch.Tensor:
        """As :meth:`.forward.CausalLM.forward`: ``tokens`` [rows, S] at positions start..start+S-1,
        KV written into ``bufs``; float32 logits of the last position [rows, V] (every position
        [rows, S, V] with ``all_logits``)."""
        rows, S = tokens.shape
        positions = torch.arange(start, start + S, device=self.device)[None, :].expand(rows, S)
        out = self.hf_model(
            input_ids=tokens,
            position_ids=positions,
            past_key_values=BufferCache(bufs, start),
            use_cache=True,
            logits_to_keep=0 if all_logits else 1,
        )
        logits = out.logits.float()
        return logits if all_logits else logits[:, -1]
