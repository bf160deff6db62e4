"""Rescoring a response under p0 for the paper's per-response statistics (App. D.2): through
the sampling engine itself (:class:`EngineRescorer`, one scoring pass, ``run --rescore
engine``, the default) or with a float32 transformers forward of a local copy of the model
(:class:`Rescorer`, ``--rescore local``), which also gives the p0 entropies.

For a response x_{1:n} after prompt x_0, with H_t the entropy of p0( . | x_{0:t-1}):

    log-likelihood = (1/n) sum_t log p0(x_t | x_{0:t-1})          (Eq. 21)
    confidence     = -(1/n) sum_t H_t                               (Eq. 22)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Scores:
    logp: tuple[float, ...]
    entropy: tuple[float, ...] | None


def statistics(logp: Sequence[float], entropy: Sequence[float] | None) -> dict[str, float | None]:
    """Eq. 21 and 22 of the paper from per-token log p0 and p0 entropies (None: no confidence)."""
    n = len(logp)
    if n == 0:
        return {"log_likelihood": None, "confidence": None}
    return {"log_likelihood": sum(logp) / n, "confidence": None if entropy is None else -sum(entropy) / n}


class Rescorer:
    """log p0 and entropy of every response token, from one float32 forward of the model folder."""

    def __init__(self, model: str, device: str | None = "cpu") -> None:
        from ..models import load

        self.model, _ = load(model, device=device)
        self._lock = threading.Lock()

    def score(self, prompt: Sequence[int], response: Sequence[int]) -> Scores:
        import torch

        ids = torch.tensor([list(prompt) + list(response)], device=self.model.device)
        with self._lock, torch.no_grad():
            logits = self.model(ids).logits[0, len(prompt) - 1 : -1].float()
        logq = torch.log_softmax(logits, dim=-1)
        tok = ids[0, len(prompt) :]
        logp = logq.gather(1, tok[:, None])[:, 0]
        entropy = -(logq.exp() * logq).sum(-1)
        return Scores(tuple(logp.tolist()), tuple(entropy.tolist()))


class EngineRescorer:
    """log p0 of every response token through the engine's own scoring pass
    (:mod:`presto_sgl.engines.scoring`), and the p0 entropies where the engine gives them (the
    reference and embedded engines; else ``entropy`` is None and the chain's are used)."""

    def __init__(self, engine: object) -> None:
        from ..engines.scoring import scorer

        self._scorer = scorer(engine)  # CapabilityError (a ValueError) when the engine cannot score

    def score(self, prompt: Sequence[int], response: Sequence[int]) -> Scores:
        scored = self._scorer.score_tokens([list(prompt) + list(response)], 0)[0]
        entropy = scored.entropy[len(prompt) :] if scored.entropy is not None else None
        return Scores(tuple(scored.logp[len(prompt) :]), entropy)  # type: ignore[arg-type]  # entropy is a slice of the scorer's tuple; mypy sees Sequence
