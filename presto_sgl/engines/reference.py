"""A reference LM in numpy, small enough to enumerate, and its engine.

The model is context dependent (a second-order Markov LM with position terms):

    logits(ctx) = W1[x_{t-1}] + W2[x_{t-2}] + Wpos[t mod P]

so p0 and q_tau = softmax(logits / tau) of any sequence are exact and cheap. Sampling
is a pure function of (seed, prefix, position): token t of a seeded request is the
inverse-CDF draw of q_tau(. | prefix) at u = H(seed, t), so results do not depend on
how requests are batched. Unseeded requests draw from the engine's own generator.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from radix import RadixTree

from ..chain.keys import hash64, uniform01
from ..errors import ConfigError
from ..fields import integer
from .base import Completion, EngineCapabilities, Request
from .grammar import Grammars
from .scoring import Scored, from_logp_rows
from .text import TextView

ALPHABET = " etaoinshrdlucmfwypvbgkjqxz.,!?'"
"""Characters of the text view, most frequent first; token id = index."""


class ReferenceLM:
    """Second-order Markov LM over ``vocab_size`` tokens with position-dependent logits."""

    def __init__(self, vocab_size: int = 32, *, sharpness: float = 2.0, period: int = 7, seed: int = 0) -> None:
        integer(2, "tokens")("vocab_size", vocab_size)
        if not (sharpness > 0 and math.isfinite(sharpness)):
            raise ConfigError("sharpness", sharpness, f"{{sharpness}} (={sharpness!r}) must be a finite number > 0")
        if not isinstance(period, int) or period < 1:
            raise ConfigError("period", period, f"{{period}} (={period!r}) must be a positive integer")
        rng = np.random.default_rng(seed)  # model weights only, local to this instance
        v = vocab_size
        self.vocab_size = v
        self.period = period
        self._w1 = rng.normal(size=(v + 1, v)) * sharpness  # row v: "no token" (start)
        self._w2 = rng.normal(size=(v + 1, v)) * sharpness * 0.5
        self._wpos = rng.normal(size=(period, v)) * 0.5
        self._dist = lru_cache(maxsize=None)(self._distribution)

    def _distribution(
        self, prev2: int, prev1: int, phase: int, temperature: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        logits = self._w1[prev1] + self._w2[prev2] + self._wpos[phase]
        logp = logits - np.logaddexp.reduce(logits)
        scaled = logits / temperature
        logq = scaled - np.logaddexp.reduce(scaled)
        cdf = np.cumsum(np.exp(logq))
        return logp, logq, cdf

    def distribution(
        self, context: Sequence[int], temperature: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log p0, log q_tau, CDF of q_tau) of the next token after ``context``."""
        v = self.vocab_size
        prev1 = context[-1] if len(context) >= 1 else v
        prev2 = context[-2] if len(context) >= 2 else v
        return self._dist(prev2, prev1, len(context) % self.period, float(temperature))

    def entropy(self, context: Sequence[int]) -> float:
        logp = self.distribution(context)[0]
        return float(-np.sum(np.exp(logp) * logp))

    def score(self, prefix: Sequence[int], tokens: Sequence[int], temperature: float = 1.0) -> tuple[float, float]:
        """(log p0, log q_tau) of ``tokens`` after ``prefix``, summed over positions."""
        ctx = list(prefix)
        lp = lq = 0.0
        for t in tokens:
            logp, logq, _ = self.distribution(ctx, temperature)
            lp += float(logp[t])
            lq += float(logq[t])
            ctx.append(t)
        return lp, lq


class ReferenceEngine:
    """The engine protocol over a :class:`ReferenceLM`, with radix-tree cache accounting.

    ``seeded=False`` ignores request seeds (like SGLang on CPU): every request is then a
    fresh draw from the engine's own generator (``rng_seed`` makes that reproducible).
    ``stop_ids`` are the model's stop tokens (its text view's; none by default); ``alphabet``:
    the text of each token id (default :data:`ALPHABET`), which constraints match against.
    """

    def __init__(
        self,
        lm: ReferenceLM | None = None,
        *,
        seeded: bool = True,
        rng_seed: int | None = None,
        cache_tokens: int = 1 << 20,
        stop_ids: Sequence[int] = (),
        alphabet: str | None = None,
    ) -> None:
        self.lm = lm if lm is not None else ReferenceLM()
        self.capabilities = EngineCapabilities(
            seeded=seeded,
            entropy=True,
            vocab_size=self.lm.vocab_size,
            score_temperatures=None,
            stops=True,
            constraints=True,
        )
        self.text = ReferenceView(self.lm.vocab_size, stop_ids, alphabet)
        self.grammars = Grammars.for_strings(
            [self.text.decode([i]) for i in range(self.lm.vocab_size)], self.text.stop_ids
        )
        self._rng = np.random.default_rng(rng_seed)
        self._cache = RadixTree(max_tokens=cache_tokens)
        self._lock = threading.Lock()  # one call at a time: chains may share the engine across threads

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        with self._lock:
            return [self._complete(r) for r in requests]

    def score_tokens(self, sequences: Sequence[Sequence[int]], top: int) -> list[Scored]:
        """log p0 of each token and the ``top`` alternatives at each position (:mod:`.scoring`)."""
        rows = lambda ids: np.stack([self.lm.distribution(ids[: t + 1])[0] for t in range(len(ids))])  # noqa: E731
        return [from_logp_rows(list(ids), rows(list(ids)), top) for ids in sequences]

    def _complete(self, request: Request) -> Completion:
        lm = self.lm
        ctx = list(request.prefix)
        tokens: list[int] = []
        logq: list[float] = []
        logp: list[float] = []
        entropy: list[float] = []
        logq_at: list[tuple[float, ...]] = []
        mask = self.grammars.start(request)
        for _ in range(request.max_new_tokens):
            lp, lq, cdf = lm.distribution(ctx, request.temperature)
            allowed = mask.allowed() if mask is not None else None
            if allowed is not None:  # q_tau masked by C and renormalized (log p0 stays the model's)
                lq = masked(lq, allowed)
                cdf = np.cumsum(np.exp(lq))
            if self.capabilities.seeded and request.seed is not None:
                u = uniform01(hash64(request.seed, len(ctx)))
            else:
                u = 1.0 - self._rng.random()
            tok = min(int(np.searchsorted(cdf, u * cdf[-1])), lm.vocab_size - 1)
            tokens.append(tok)
            logq.append(float(lq[tok]))
            logp.append(float(lp[tok]))
            if request.return_entropy:
                entropy.append(float(-np.sum(np.exp(lp) * lp)))
            if request.score_temperatures:
                at = [lm.distribution(ctx, t)[1] for t in request.score_temperatures]
                if allowed is not None:
                    at = [masked(row, allowed) for row in at]
                logq_at.append(tuple(float(row[tok]) for row in at))
            if mask is not None:
                mask.accept(tok)
            ctx.append(tok)
            if tok in request.stop:
                break
        cached = self._cache.match_prefix(request.prefix).length
        self._cache.insert(ctx)
        return Completion(
            tokens=tuple(tokens),
            logq=tuple(logq),
            logp=tuple(logp),
            entropy=tuple(entropy) if request.return_entropy else None,
            cached_tokens=cached,
            logq_at=tuple(logq_at) if request.score_temperatures else None,
        )

    # -- text view for the CLI and demos ---------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.text.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.text.decode(ids)


def masked(logq: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """log q restricted to ``allowed`` and renormalized (-inf elsewhere)."""
    out = np.where(allowed, logq, -np.inf)
    return out - np.logaddexp.reduce(out[allowed])


class ReferenceView(TextView):
    """The reference LM's text: one character of ``alphabet`` (default :data:`ALPHABET`) per
    token; no stop token unless ``stop_ids`` are given."""

    has_tokenizer = True

    def __init__(self, vocab_size: int, stop_ids: Sequence[int] = (), alphabet: str | None = None) -> None:
        if alphabet is not None and len(set(alphabet)) != len(alphabet):
            raise ConfigError("alphabet", alphabet, "{alphabet} must not repeat a character")
        self.alphabet = (alphabet if alphabet is not None else ALPHABET)[:vocab_size]
        self.stop_ids = tuple(stop_ids)

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        bad = sorted({ch for ch in text.lower() if ch not in self.alphabet})
        if bad:
            raise ConfigError(
                "prompt",
                text,
                f"{{prompt}} contains characters {bad} outside the reference vocabulary {self.alphabet!r}",
            )
        return [self.alphabet.index(ch) for ch in text.lower()]

    def decode(self, ids: Sequence[int]) -> str:
        a = self.alphabet
        return "".join(a[i] if i < len(a) else f"<{i}>" for i in ids)
