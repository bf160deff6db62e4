"""The paper's sequential MultiTryMH baseline on the embedded engine (benchmark only).

The paper's sequential MultiTryMH rescores every candidate at all three temperatures
(App. E.1); presto-sgl's reuses the log-probabilities of the sampling pass. This wrapper
gives the first: each call draws the suffixes without score temperatures, then scores
every drawn sequence in one batched full forward pass per temperature of the set (no KV
reuse, as a separate scoring request would), inside the same timed engine call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from presto_sgl.engines.base import Completion, Request


class RescoringEngine:
    """An :class:`~presto_sgl.engines.embedded.EmbeddedEngine` whose log q at the score
    temperatures comes from separate scoring passes, one per temperature."""

    def __init__(self, engine) -> None:
        self.inner = engine
        self.capabilities = engine.capabilities
        self.model = engine.lm.hf_model

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        plain = self.inner.generate([replace(r, score_temperatures=()) for r in requests])
        wanted = sorted({t for r in requests for t in r.score_temperatures})
        if not wanted:
            return plain
        seqs = [list(r.prefix) + list(c.tokens) for r, c in zip(requests, plain)]
        width = max(map(len, seqs))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        scored: dict[float, list[list[float]]] = {}
        for t in wanted:  # one scoring pass per temperature
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            rows = []
            for i, (r, c) in enumerate(zip(requests, plain)):
                n = len(r.prefix)
                z = logits[i, n - 1 : n - 1 + len(c.tokens)] / t
                rows.append((z.gather(1, torch.tensor(c.tokens)[:, None])[:, 0] - torch.logsumexp(z, -1)).tolist())
            scored[t] = rows
        return [
            replace(
                c, logq_at=tuple(zip(*(scored[t][i] for t in r.score_temperatures))) if r.score_temperatures else None
            )
            for i, (r, c) in enumerate(zip(requests, plain))
        ]
