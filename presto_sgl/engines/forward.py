"""Position-addressed KV buffers, and the embedded engine's Llama-family fast path over them.

Every forward the embedded engine runs feeds tokens at absolute positions and keeps their
KV in :class:`KVBuffers` rows, so it can fork one sequence into many rows that share
prefix KV and decode them position-synchronously: at step t every active row feeds the
token at absolute position t and attends over its own KV [0, t], so no padding is ever
needed. The engine picks one of two forwards (:func:`.embedded.causal_lm`):

* :class:`CausalLM` -- the fast path, written out for ``LlamaForCausalLM`` and the
  Qwen2/Mistral-style models (RMSNorm, default rope, grouped-query attention, SwiGLU);
* :class:`~.generic.GenericCausalLM` -- any other transformers causal LM, through its own
  ``forward`` with a cache object over the same buffers (Gemma 3, Qwen3, Phi, ...).

Requires torch (imported by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

FAST_PATH_MODEL_TYPES = ("llama", "qwen2", "mistral")


def fast_path_refusal(cfg: Any) -> str | None:
    """Why the Llama-family fast path cannot run a model of config ``cfg`` (None: it can)."""
    if cfg.model_type not in FAST_PATH_MODEL_TYPES:
        return f"model type {cfg.model_type!r} is not one of {FAST_PATH_MODEL_TYPES}"
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope type {rope.get('rope_type')!r} is not the default rope"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return f"it has a sliding window ({cfg.sliding_window})"
    return None


@dataclass
class KVBuffers:
    """Per-layer key/value buffers, shape [rows, kv_heads, length, head_dim]."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    def rows(self, start: int, stop: int) -> KVBuffers:
        return KVBuffers([x[start:stop] for x in self.k], [x[start:stop] for x in self.v])

    def select(self, rows: list[int]) -> KVBuffers:
        """A copy holding ``rows``, in that order."""
        idx = torch.tensor(rows, device=self.k[0].device)
        return KVBuffers([x.index_select(0, idx) for x in self.k], [x.index_select(0, idx) for x in self.v])

    def put_row(self, row: int, src: KVBuffers, src_row: int, n: int) -> None:
        """Copy the first ``n`` positions of ``src``'s row ``src_row`` into ``row``."""
        for dst, frm in zip(self.k + self.v, src.k + src.v):
            dst[row, :, :n] = frm[src_row, :, :n]


class WorkingRows:
    """The rows a call still decodes, kept contiguous in a working KV buffer.

    Rows are in ``bufs`` slot order (sorted by prefix length, so the rows whose prefix is
    in place are a leading run). A row that has all its tokens leaves the batch: once
    finished rows are at least half of the working rows, the rest are gathered into a
    smaller buffer, and every row's KV goes back to its own slot of ``bufs`` when it
    leaves (the radix cache stores from there). Under stop tokens rows end at different
    positions; without this a call would feed every ended row until its longest row ends.
    """

    def __init__(self, bufs: KVBuffers, n: int) -> None:
        self.bufs = bufs
        self.work = bufs
        self.slots = list(range(n))  # request index in each working row

    def active(self, starts: list[int], t: int) -> int:
        """Working rows whose prefix is in place at step t (a leading run of the slots)."""
        n = 0
        while n < len(self.slots) and starts[self.slots[n]] <= t:
            n += 1
        return n

    def drop(self, finished: list[int], fed: int) -> None:
        """Retire ``finished`` (request indices) once they are half the working rows or all of
        them; ``fed``: positions whose KV is written for every working row."""
        if not finished or 2 * len(finished) < len(self.slots):
            return
        gone = set(finished)
        if self.work is not self.bufs:  # in bufs itself a row already sits in its own slot
            for j, r in enumerate(self.slots):
                if r in gone:
                    self.bufs.put_row(r, self.work, j, fed)
        keep = [j for j, r in enumerate(self.slots) if r not in gone]
        self.slots = [self.slots[j] for j in keep]
        if self.slots:
            self.work = self.work.select(keep)


@dataclass
class KVSegment:
    """KV of a run of consecutive tokens, [layers, kv_heads, n, head_dim]; a radix-tree payload."""

    k: torch.Tensor
    v: torch.Tensor

    def __len__(self) -> int:
        return self.k.shape[2]

    def __getitem__(self, s: slice) -> KVSegment:
        return KVSegment(self.k[:, :, s], self.v[:, :, s])

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class BufferView:
    """Tokens [start, stop) of one buffer row, materialized only when sliced (radix insert)."""

    def __init__(self, bufs: KVBuffers, row: int, start: int, stop: int) -> None:
        self.bufs, self.row, self.start, self.stop = bufs, row, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, s: slice) -> KVSegment:
        a, b, _ = s.indices(len(self))
        lo, hi = self.start + a, self.start + b
        return KVSegment(
            torch.stack([x[self.row, :, lo:hi] for x in self.bufs.k]).clone(),
            torch.stack([x[self.row, :, lo:hi] for x in self.bufs.v]).clone(),
        )


class CausalLM:
    """The decoder stack of a Llama-family transformers causal LM, written out over :class:`KVBuffers`."""

    def __init__(self, hf_model: Any) -> None:
        """``hf_model``: a transformers causal LM (a ``torch.nn.Module`` whose submodules and
        config attributes are read by name)."""
        cfg = hf_model.config
        refusal = fast_path_refusal(cfg)
        if refusal:
            raise ValueError(f"the embedded engine's fast path cannot run this model: {refusal}")
        rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", 10000.0)}
        self.hf_model = hf_model.eval()
        self.config = cfg
        inner = hf_model.model
        self.embed = inner.embed_tokens
        self.layers: list[Any] = list(inner.layers)
        self.norm = inner.norm
        self.lm_head = hf_model.lm_head
        self.n_heads: int = cfg.num_attention_heads
        self.n_kv_heads: int = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim: int = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.max_positions: int = cfg.max_position_embeddings
        self.vocab_size: int = cfg.vocab_size
        self.dtype: torch.dtype = next(hf_model.parameters()).dtype
        self.device: torch.device = next(hf_model.parameters()).device
        theta = float(rope["rope_theta"])
        self.inv_freq = 1.0 / (
            theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float, device=self.device) / self.head_dim)
        )

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * len(self.layers) * self.n_kv_heads * self.head_dim * torch.finfo(self.dtype).bits // 8

    def new_buffers(self, rows: int, length: int) -> KVBuffers:
        shape = (rows, self.n_kv_heads, length, self.head_dim)
        mk = lambda: torch.empty(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return KVBuffers([mk() for _ in self.layers], [mk() for _ in self.layers])

    def _rope(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(start, start + n, dtype=torch.float, device=self.device)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: int, bufs: KVBuffers, *, all_logits: bool = False) -> torch.Tensor:
        """Feed ``tokens`` [rows, S] at positions start..start+S-1 (the same for every row).

        Writes their KV into ``bufs`` (whose first ``start`` positions hold each row's
        history) and returns float32 logits of the last position [rows, V], or of every
        position [rows, S, V] with ``all_logits``.
        """
        rows, S = tokens.shape
        end = start + S
        h = self.embed(tokens)
        cos, sin = self._rope(start, S)
        mask = None
        if S > 1:
            q_pos = torch.arange(start, end, device=self.device)[:, None]
            mask = torch.arange(end, device=self.device)[None, :] <= q_pos
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(rows, S, self.n_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(rows, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(rows, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            bufs.k[i][:, :, start:end] = k
            bufs.v[i][:, :, start:end] = v
            o = F.scaled_dot_product_attention(
                q,
                bufs.k[i][:, :, :end],
                bufs.v[i][:, :, :end],
                attn_mask=mask,
                enable_gqa=self.n_kv_heads != self.n_heads,
            )
            h = h + attn.o_proj(o.transpose(1, 2).reshape(rows, S, self.n_heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        h = self.norm(h if all_logits else h[:, -1:])
        logits = self.lm_head(h).float()
        return logits if all_logits else logits[:, 0]
