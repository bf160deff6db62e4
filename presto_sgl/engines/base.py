"""The token-level engine seam (docs/design.md §6).

A batch of :class:`Request` (prefix token ids, number of new tokens, temperature,
optional seed) maps to one :class:`Completion` per request: the new token ids with
per-token log q_tau (after temperature), log p0 (raw, T = 1) and optionally the p0
entropy, all from the same forward pass, plus how many prefix tokens were cached.
Generation never stops at EOS: exactly ``max_new_tokens`` tokens come back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import EngineError


@dataclass(frozen=True)
class Request:
    """Generate ``max_new_tokens`` tokens after ``prefix`` from q_tau, tau = ``temperature``."""

    prefix: tuple[int, ...]
    max_new_tokens: int
    temperature: float
    seed: int | None = None
    return_entropy: bool = False


@dataclass(frozen=True)
class Completion:
    tokens: tuple[int, ...]
    logq: tuple[float, ...]
    logp: tuple[float, ...]
    entropy: tuple[float, ...] | None = None
    cached_tokens: int = 0


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do. ``seeded``: same seed and prefix give the same tokens."""

    seeded: bool
    entropy: bool
    vocab_size: int
    context_length: int | None = None  # max prompt + new tokens; None: unbounded


@runtime_checkable
class Engine(Protocol):
    capabilities: EngineCapabilities

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        """One model call: all ``requests`` in one batch, results in request order."""
        ...


def validate_completion(request: Request, completion: Completion, vocab_size: int) -> None:
    """Raise :class:`EngineError` unless ``completion`` answers ``request`` in full."""
    n = request.max_new_tokens
    lengths = {"tokens": len(completion.tokens), "logq": len(completion.logq), "logp": len(completion.logp)}
    if request.return_entropy:
        lengths["entropy"] = -1 if completion.entropy is None else len(completion.entropy)
    bad = {k: v for k, v in lengths.items() if v != n}
    if bad:
        raise EngineError(f"engine returned wrong lengths {bad} for a request of {n} new tokens")
    for t in completion.tokens:
        if not (0 <= t < vocab_size):
            raise EngineError(f"engine returned token id {t} outside the vocabulary [0, {vocab_size})")
    for name in ("logq", "logp"):
        for v in getattr(completion, name):
            if math.isnan(v) or v > 1e-6:
                raise EngineError(f"engine returned {name} value {v}: log-probabilities must be <= 0 and not NaN")
