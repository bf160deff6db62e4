"""The immutable chain state: response tokens with their per-token log q_tau and log p0."""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass


@dataclass(frozen=True)
class ChainState:
    """Prompt plus T response tokens; ``logq[t]``/``logp[t]`` score ``tokens[t]`` in context.

    ``entropy[t]`` (optional) is the p0 entropy of the next-token distribution at t.
    ``logq_at[t]`` (optional) holds log q of ``tokens[t]`` at each of a kernel's score
    temperatures (MultiTryMH's temperature mixture). Values of one state always come from
    the pass that generated them, never mixed.
    """

    prompt: tuple[int, ...]
    tokens: tuple[int, ...] = ()
    logq: tuple[float, ...] = ()
    logp: tuple[float, ...] = ()
    _: KW_ONLY
    entropy: tuple[float, ...] | None = None
    logq_at: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.tokens)
        optional = (self.entropy, self.logq_at)
        if len(self.logq) != n or len(self.logp) != n or any(v is not None and len(v) != n for v in optional):
            raise ValueError(
                f"ChainState needs one log q, log p0 (and entropy) per token: got {n} tokens, "
                f"{len(self.logq)} logq, {len(self.logp)} logp"
            )

    @property
    def length(self) -> int:
        """T, the number of response tokens."""
        return len(self.tokens)

    def context(self, cut: int) -> tuple[int, ...]:
        """The prompt and the first ``cut`` response tokens: the prefix a proposal keeps."""
        return self.prompt + self.tokens[:cut]

    def suffix_logq(self, cut: int) -> float:
        """log q_tau(x_{c+1:T} | x_{0:c})."""
        return math.fsum(self.logq[cut:])

    def suffix_logp(self, cut: int) -> float:
        """log p0(x_{c+1:T} | x_{0:c})."""
        return math.fsum(self.logp[cut:])

    def log_likelihood(self) -> float:
        """log p0 of the whole response given the prompt."""
        return math.fsum(self.logp)

    def replace_suffix(
        self,
        cut: int,
        tokens: tuple[int, ...],
        logq: tuple[float, ...],
        logp: tuple[float, ...],
        entropy: tuple[float, ...] | None = None,
        logq_at: tuple[tuple[float, ...], ...] | None = None,
    ) -> ChainState:
        """The state with response tokens from ``cut`` on replaced (or appended); entropy and
        ``logq_at`` are kept when both the state and the new suffix carry them."""
        return ChainState(
            prompt=self.prompt,
            tokens=self.tokens[:cut] + tokens,
            logq=self.logq[:cut] + logq,
            logp=self.logp[:cut] + logp,
            entropy=(self.entropy[:cut] + entropy) if self.entropy is not None and entropy is not None else None,
            logq_at=(self.logq_at[:cut] + logq_at) if self.logq_at is not None and logq_at is not None else None,
        )

    def common_prefix(self, other: ChainState) -> int:
        """Length of the longest common prefix of the two responses."""
        n = min(self.length, other.length)
        for i in range(n):
            if self.tokens[i] != other.tokens[i]:
                return i
        return n
