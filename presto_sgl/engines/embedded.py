"""The embedded engine: transformers weights + torch, in process, with a radix KV cache.

One call decodes a batch of suffix requests *position-synchronously*: rows are sorted
by prefix length; at step t every row whose prefix is in place feeds its token at
absolute position t and attends over its own KV [0, t]. Forks of one root at different
cuts therefore batch without padding, and the prefix KV of every row comes from the
radix tree (computed once, reused across rows and calls). The last prefix token is
always re-fed so the first new token's distribution comes from this pass. Rows that have
their tokens (all of them, or up to a stop token) leave the batch (:class:`~.forward.WorkingRows`), so a
call's cost follows the tokens its rows decode, not rows x its longest row.

Per new token the engine returns log q_tau = log_softmax(logits / tau) (masked by the
request's constraint, if any: :mod:`.grammar`), log p0 = log_softmax(logits), the p0
entropy and log q at any requested score temperatures, all from the same float32 logits
row, over the full vocabulary. Seeded requests draw their
uniforms from their own torch.Generator; unseeded ones from the engine's generator.
Tokens are inverse-CDF draws of q_tau.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from radix import RadixTree

from ..errors import CapabilityError, ConfigError
from .base import Completion, EngineCapabilities, Request
from .forward import BufferView, CausalLM, WorkingRows, fast_path_refusal
from .generic import GenericCausalLM
from .grammar import Grammars, RowMask
from .scoring import Scored, from_logp_rows
from .text import TokenizerText


@dataclass
class CallStats:
    """What one ``generate`` call did."""

    requests: int = 0
    cached_tokens: int = 0  # prefix tokens whose KV came from the radix cache
    prefill_tokens: int = 0  # prefix tokens computed in this call
    decode_tokens: int = 0  # new tokens generated
    _: KW_ONLY
    forward_steps: int = 0  # position-synchronous decode steps
    row_steps: int = 0  # rows fed, summed over those steps
    seconds: float = 0.0
    peak_rows: int = 0


@dataclass
class EngineTotals:
    """Sums over every ``generate`` call, and the last call's :class:`CallStats` (an engine under
    ``serve`` runs for months: nothing here grows with the number of calls)."""

    calls: int = 0
    cached_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    _: KW_ONLY
    last: CallStats | None = None


@dataclass
class RowDraw:
    """One request's draw in progress: its sequence (prefix, then the drawn tokens) with their
    per-token log q, log p0, entropy and log q at the score temperatures."""

    req: Request
    gen: torch.Generator
    cached: int  # prefix tokens whose KV came from the radix cache
    mask: RowMask | None = None  # the request's constraint, resumed at its response prefix
    _: KW_ONLY
    seq: list[int] = field(init=False)
    logq: list[float] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    logq_at: list[tuple[float, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seq = list(self.req.prefix)

    def append(
        self, token: int, logq: float, logp: float, entropy: float | None, logq_at: tuple[float, ...] | None
    ) -> None:
        if self.mask is not None:
            self.mask.accept(token)
        self.seq.append(token)
        self.logq.append(logq)
        self.logp.append(logp)
        if entropy is not None:
            self.entropy.append(entropy)
        if logq_at is not None:
            self.logq_at.append(logq_at)

    def completion(self) -> Completion:
        req = self.req
        return Completion(
            tokens=tuple(self.seq[len(req.prefix) :]),
            logq=tuple(self.logq),
            logp=tuple(self.logp),
            entropy=tuple(self.entropy) if req.return_entropy else None,
            cached_tokens=self.cached,
            logq_at=tuple(self.logq_at) if req.score_temperatures else None,
        )


FORWARDS = ("auto", "fast", "generic")


def causal_lm(hf_model: Any, forward: str = "auto") -> CausalLM | GenericCausalLM:
    """The forward for ``hf_model``: ``fast`` (Llama family, :class:`~.forward.CausalLM`), ``generic``
    (the model's own forward, :class:`~.generic.GenericCausalLM`), or ``auto``: fast where it applies."""
    if forward not in FORWARDS:
        raise ValueError(f"forward={forward!r} must be one of {FORWARDS}")
    refusal = fast_path_refusal(hf_model.config)
    if forward == "fast" and refusal:
        raise ValueError(f"the embedded engine's fast path cannot run this model: {refusal}; use forward='generic'")
    if forward == "generic" or refusal:
        return GenericCausalLM(hf_model)
    return CausalLM(hf_model)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor, block: int = 256) -> torch.Tensor:
    """Per row, the first index j with cdf[j] >= u * total: an exact draw from ``probs``.

    Two levels (block sums, then one block) keep the float64 prefix sums short.
    """
    rows, vocab = probs.shape
    nb = -(-vocab // block)
    padded = F.pad(probs, (0, nb * block - vocab)).view(rows, nb, block)
    bcdf = torch.cumsum(padded.sum(-1, dtype=torch.float64), dim=-1)
    target = u * bcdf[:, -1]
    bi = torch.searchsorted(bcdf, target[:, None]).clamp_(max=nb - 1)[:, 0]
    before = torch.where(bi > 0, bcdf.gather(1, (bi - 1).clamp(min=0)[:, None])[:, 0], torch.zeros_like(target))
    inner = torch.cumsum(padded[torch.arange(rows, device=probs.device), bi].double(), dim=-1) + before[:, None]
    ti = torch.searchsorted(inner, target[:, None]).clamp_(max=block - 1)[:, 0]
    return (bi * block + ti).clamp_(max=vocab - 1)


class EmbeddedEngine(TokenizerText):
    """The engine protocol on a transformers causal LM (CPU by default, CUDA when asked)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        cache_bytes: int = 1 << 30,
        seeded: bool = True,
        rng_seed: int | None = None,
        name: str = "model",
        forward: str = "auto",
    ) -> None:
        """``forward``: ``auto`` runs Llama-family models on the written-out fast path and any other
        transformers causal LM through its own forward (:func:`causal_lm`)."""
        self.lm = causal_lm(model, forward)
        self.tokenizer = tokenizer
        self.name = name
        # The answer ends at the generation config's EOS ids too (with the tokenizer's; engines/text.py).
        gen = getattr(model, "generation_config", None) or getattr(model, "config", None)
        self.stop_token_ids = getattr(gen, "eos_token_id", None)
        self.capabilities = EngineCapabilities(
            seeded=seeded,
            entropy=True,
            vocab_size=self.lm.vocab_size,
            context_length=self.lm.max_positions,
            score_temperatures=None,
            stops=True,
            constraints=tokenizer is not None,
        )
        self._grammars: Grammars | None = None
        if cache_bytes < 0:
            raise ConfigError("cache_bytes", cache_bytes, f"{{cache_bytes}} (={cache_bytes}) must be >= 0")
        budget = cache_bytes // self.lm.kv_bytes_per_token
        self.cache = RadixTree(max_tokens=budget) if budget > 0 else None
        self._rng = torch.Generator(device="cpu")
        self._rng.manual_seed(rng_seed if rng_seed is not None else int.from_bytes(os.urandom(7), "little"))
        self.totals = EngineTotals()
        self._lock = threading.Lock()  # one call at a time: chains may share the engine across threads

    # -- the protocol ----------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        with self._lock:
            return self._generate(requests)

    def score_tokens(self, sequences: Sequence[Sequence[int]], top: int) -> list[Scored]:
        """log p0 of each token and the ``top`` alternatives at each position, from one full
        forward of each sequence in float32 logits (:mod:`.scoring`)."""
        out = []
        for ids in sequences:
            x = torch.tensor([list(ids)], device=self.lm.device)
            with self._lock, torch.no_grad():
                logits = self.lm.hf_model(x).logits[0].float()
            out.append(from_logp_rows(list(ids), torch.log_softmax(logits, -1).cpu().numpy(), top))
        return out

    def _generate(self, requests: Sequence[Request]) -> list[Completion]:
        t_start = time.perf_counter()
        lm = self.lm
        if not requests:
            return []
        for req in requests:
            if req.max_new_tokens < 1:
                raise ConfigError(
                    "max_new_tokens",
                    req.max_new_tokens,
                    f"{{max_new_tokens}} (={req.max_new_tokens}) must be >= 1 for the embedded engine",
                )
            if len(req.prefix) < 1:
                raise ValueError("a request `prefix` is empty; the embedded engine needs at least one prompt token")
            end = len(req.prefix) + req.max_new_tokens
            if end > lm.max_positions:
                raise ValueError(
                    f"prompt + new tokens = {end} exceeds the model context ({lm.max_positions} positions); "
                    "shorten the prompt or lower --max-new-tokens"
                )
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prefix))
        reqs = [requests[i] for i in order]
        ends = [len(r.prefix) + r.max_new_tokens for r in reqs]
        width = max(ends) - 1  # the last new token is never fed
        bufs = lm.new_buffers(len(reqs), max(width, 1))
        stats = CallStats(requests=len(reqs))
        draws = [
            RowDraw(r, self._generator(r), self._load_history(row, r.prefix, bufs, stats), self._mask(r))
            for row, r in enumerate(reqs)
        ]
        seqs = [d.seq for d in draws]
        temps = torch.tensor([r.temperature for r in reqs], dtype=torch.float32, device=lm.device)
        starts = [len(r.prefix) - 1 for r in reqs]
        rows = WorkingRows(bufs, len(reqs))
        for t in range(starts[0], width):
            active = rows.active(starts, t)
            if not active:  # the rows in place have all left; the next joins at its own start
                continue
            feed = [seqs[r][t] if t < len(seqs[r]) else 0 for r in rows.slots[:active]]
            logits = lm.forward(torch.tensor(feed, device=lm.device)[:, None], t, rows.work.rows(0, active))
            stats.forward_steps += 1
            stats.row_steps += active
            stats.peak_rows = max(stats.peak_rows, active)
            live = [(j, r) for j, r in enumerate(rows.slots[:active]) if t + 1 < ends[r] and t + 1 == len(seqs[r])]
            self._sample(logits, live, temps, draws)
            for _, r in live:
                if seqs[r][-1] in reqs[r].stop:
                    ends[r] = len(seqs[r])  # ended at a stop token: no more tokens for this row
            rows.drop([r for r in rows.slots if len(seqs[r]) >= ends[r]], fed=t + 1)
            if not rows.slots:  # every row has its tokens (at the latest at t = width - 1)
                break
        self._store(reqs, seqs, ends, bufs)
        completions: list[Completion | None] = [None] * len(reqs)
        for r, draw in enumerate(draws):
            comp = draw.completion()
            completions[order[r]] = comp
            stats.decode_tokens += len(comp.tokens)
        stats.seconds = time.perf_counter() - t_start
        self._account(stats)
        return completions  # type: ignore[return-value]  # the loop above fills every slot

    # -- pieces ------------------------------------------------------------------------------
    def _mask(self, req: Request) -> RowMask | None:
        """The request's constraint mask (grammars compiled over the tokenizer on first use)."""
        if req.constraint is None:
            return None
        if self._grammars is None:
            if self.tokenizer is None:
                raise CapabilityError(
                    "constraints need the model's tokenizer; this embedded engine was built without one"
                )
            self._grammars = Grammars.for_tokenizer(self.tokenizer, self.lm.vocab_size, self.text.stop_ids)
        return self._grammars.start(req)

    def _generator(self, req: Request) -> torch.Generator:
        if self.capabilities.seeded and req.seed is not None:
            g = torch.Generator(device="cpu")
            g.manual_seed(req.seed)
            return g
        return self._rng

    def _sample(
        self, logits: torch.Tensor, live: list[tuple[int, int]], temps: torch.Tensor, draws: list[RowDraw]
    ) -> None:
        """Draw the next token of each live row from q_tau = softmax(z / tau) by inverse CDF
        (``live``: (row of ``logits``, request index) pairs) into its :class:`RowDraw`."""
        if not live:
            return
        idx = torch.tensor([j for j, _ in live], device=logits.device)
        rows = [r for _, r in live]
        z = logits[idx]
        zq = z / temps[torch.tensor(rows, device=temps.device), None]
        allowed = self._allowed([draws[r].mask for r in rows], z)
        if allowed is not None:  # q_tau masked by C and renormalized; log p0 (from z) stays unmasked
            zq = zq.masked_fill(~allowed, float("-inf"))
        lse_p = torch.logsumexp(z, dim=-1)
        lse_q = torch.logsumexp(zq, dim=-1)
        u = 1.0 - torch.stack([torch.rand((), generator=draws[r].gen, dtype=torch.float64) for r in rows])  # (0, 1]
        tok = inverse_cdf(torch.exp(zq - lse_q[:, None]), u.to(z.device))[:, None]
        lq = (zq.gather(1, tok)[:, 0] - lse_q).tolist()
        lp = (z.gather(1, tok)[:, 0] - lse_p).tolist()
        want_entropy = [draws[r].req.return_entropy for r in rows]
        en = None
        if any(want_entropy):
            logp = z - lse_p[:, None]
            en = (-(logp.exp() * logp).sum(-1)).tolist()
        at = self._logq_at(z, tok, [draws[r].req.score_temperatures for r in rows], allowed)
        for j, (r, t) in enumerate(zip(rows, tok[:, 0].tolist())):
            draws[r].append(t, lq[j], lp[j], en[j] if en is not None and want_entropy[j] else None, at[j])

    @staticmethod
    def _allowed(masks: list[RowMask | None], z: torch.Tensor) -> torch.Tensor | None:
        """Per live row, the tokens its constraint allows next (None: no row has one)."""
        if all(m is None for m in masks):
            return None
        rows = [m.allowed() if m is not None else np.ones(z.shape[-1], dtype=bool) for m in masks]
        return torch.from_numpy(np.stack(rows)).to(z.device)

    @staticmethod
    def _logq_at(
        z: torch.Tensor, tok: torch.Tensor, wanted: list[tuple[float, ...]], allowed: torch.Tensor | None = None
    ) -> list[tuple[float, ...] | None]:
        """Per live row, log_softmax(z / t)[token] at each of its score temperatures t (one
        pass per distinct temperature, over the rows that ask for it; masked by ``allowed``)."""
        scored: dict[tuple[int, float], float] = {}
        for t in {t for ts in wanted for t in ts}:
            rows = [j for j, ts in enumerate(wanted) if t in ts]
            idx = torch.tensor(rows, device=z.device)
            zt = z[idx] / t
            if allowed is not None:
                zt = zt.masked_fill(~allowed[idx], float("-inf"))
            values = (zt.gather(1, tok[idx])[:, 0] - torch.logsumexp(zt, dim=-1)).tolist()
            scored.update(((j, t), v) for j, v in zip(rows, values))
        return [tuple(scored[j, t] for t in ts) if ts else None for j, ts in enumerate(wanted)]

    def _load_history(self, row: int, prefix: Sequence[int], bufs, stats: CallStats) -> int:
        """Put the KV of prefix[:-1] into ``row``: cached segments, then prefill the rest."""
        hist = len(prefix) - 1
        m = 0
        if self.cache is not None and hist > 0:
            match = self.cache.match_prefix(prefix[:hist])
            m = match.length
            off = 0
            for seg in match.values:
                n = len(seg)
                for i in range(len(bufs.k)):
                    bufs.k[i][row, :, off : off + n] = seg.k[i]
                    bufs.v[i][row, :, off : off + n] = seg.v[i]
                off += n
        if m < hist:
            tokens = torch.tensor(list(prefix[m:hist]), device=self.lm.device)[None, :]
            self.lm.forward(tokens, m, bufs.rows(row, row + 1))
            stats.prefill_tokens += hist - m
            if self.cache is not None:
                self._insert(list(prefix[:hist]), BufferView(bufs, row, 0, hist))
        stats.cached_tokens += m
        return m

    def _store(self, reqs, seqs, ends, bufs) -> None:
        """Insert every row's fed tokens (all but its last new token) with their KV."""
        if self.cache is None:
            return
        for r in range(len(reqs)):
            fed = ends[r] - 1
            if fed > 0:
                self._insert(seqs[r][:fed], BufferView(bufs, r, 0, fed))

    def _insert(self, tokens: list[int], view: BufferView) -> None:
        assert self.cache is not None
        if len(tokens) > (self.cache.max_tokens or 0):
            return  # larger than the whole cache: not worth keeping
        from radix import TreeFullError

        with contextlib.suppress(TreeFullError):  # everything else is locked: serve without caching
            self.cache.insert(tokens, view)

    def _account(self, stats: CallStats) -> None:
        t = self.totals
        t.calls += 1
        t.cached_tokens += stats.cached_tokens
        t.prefill_tokens += stats.prefill_tokens
        t.decode_tokens += stats.decode_tokens
        t.last = stats

    @property
    def last_call(self) -> CallStats | None:
        return self.totals.last
