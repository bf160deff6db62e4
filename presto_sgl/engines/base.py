"""The token-level engine seam (docs/design.md §6).

A batch of :class:`Request` (prefix token ids, number of new tokens, temperature,
optional seed, optional stop tokens) maps to one :class:`Completion` per request: the new token ids with
per-token log q_tau (after temperature), log p0 (raw, T = 1) and optionally the p0
entropy and log q at other temperatures (``score_temperatures``), all from the same
forward pass, plus how many prefix tokens were cached.
Generation never stops at EOS: exactly ``max_new_tokens`` tokens come back, unless the
request names ``stop`` tokens (the EOS-terminated target, engines with ``capabilities.stops``):
then it ends after the first of them, which is returned with its values. A request with a
``constraint`` (engines with ``capabilities.constraints``) draws from q_tau masked by it and
renormalized, and returns that masked log q; log p0 stays the model's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import EngineError

if TYPE_CHECKING:
    from ..constraints import Constraint
    from ..kernels.base import Proposal
    from .text import TextView


@dataclass(frozen=True)
class Request:
    """Generate ``max_new_tokens`` tokens after ``prefix`` from q_tau, tau = ``temperature``."""

    prefix: tuple[int, ...]
    max_new_tokens: int
    temperature: float
    seed: int | None = None
    _: KW_ONLY
    return_entropy: bool = False
    score_temperatures: tuple[float, ...] = ()  # also return log q of each new token at these
    route: str | None = None  # the chain's routing key: a router keeps a chain's requests on one worker
    stop: tuple[int, ...] = ()  # end after the first of these tokens (returned); () never stops early
    constraint: Constraint | None = None  # mask q_tau by C (log p0 unmasked): engines with ``capabilities.constraints``
    resume: int = 0  # the last ``resume`` prefix tokens are the response so far: C's matcher resumes over them


@dataclass(frozen=True)
class Completion:
    tokens: tuple[int, ...]
    logq: tuple[float, ...]
    logp: tuple[float, ...]
    entropy: tuple[float, ...] | None = None
    _: KW_ONLY
    cached_tokens: int = 0
    logq_at: tuple[tuple[float, ...], ...] | None = None  # per token, log q at the request's score temperatures


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do. ``seeded``: same seed and prefix give the same tokens."""

    seeded: bool
    entropy: bool
    vocab_size: int
    context_length: int | None = None  # max prompt + new tokens; None: unbounded
    _: KW_ONLY
    score_temperatures: tuple[float, ...] | None = ()
    """Temperatures at which log q of each new token can be returned: () none, None any."""
    stops: bool = False
    """Requests may end at their ``stop`` tokens (the EOS-terminated target)."""
    constraints: bool = False
    """Requests may carry a :class:`~presto_sgl.constraints.Constraint`: q_tau masked by it, resumed
    at the request's response prefix (structured power sampling, docs/design.md §2.2)."""

    def scores_at(self, temperatures: Sequence[float]) -> bool:
        """Whether the engine returns log q at every one of ``temperatures``."""
        if self.score_temperatures is None:
            return True
        return all(any(math.isclose(t, s, rel_tol=1e-9) for s in self.score_temperatures) for t in temperatures)


@runtime_checkable
class Engine(Protocol):
    """The token-level seam: ``generate`` and ``capabilities``; ``text`` is the engine's text
    view (:mod:`presto_sgl.engines.text`), which only front ends use."""

    @property
    def capabilities(self) -> EngineCapabilities: ...

    @property
    def text(self) -> TextView: ...

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        """One model call: all ``requests`` in one batch, results in request order."""
        ...


def validate_completion(request: Request, completion: Completion, vocab_size: int) -> None:
    """Raise :class:`EngineError` unless ``completion`` answers ``request`` in full."""
    check_lengths(request, completion)
    check_values(completion, vocab_size)


def check_lengths(request: Request, completion: Completion) -> None:
    """Raise :class:`EngineError` unless ``completion`` has one value of each kind per new token
    of ``request``: ``max_new_tokens`` of them, or with ``stop`` tokens 1 to ``max_new_tokens``
    ending at the first stop token (O(1) per completion without ``stop``; :func:`check_values`
    reads the values)."""
    n = request.max_new_tokens
    if request.stop:
        n = len(completion.tokens)
        stop = set(request.stop)
        first = next((i for i, t in enumerate(completion.tokens) if t in stop), None)
        if (
            not 1 <= n <= request.max_new_tokens
            or (first is None and n < request.max_new_tokens)
            or (first is not None and first != n - 1)
        ):
            raise EngineError(
                f"engine returned {n} tokens for a request of at most {request.max_new_tokens} that ends at its first "
                f"stop token {sorted(stop)} (first stop at {first}): "
                "it must stop there, or run to the limit without one"
            )
    lengths = {"tokens": len(completion.tokens), "logq": len(completion.logq), "logp": len(completion.logp)}
    if request.return_entropy:
        lengths["entropy"] = -1 if completion.entropy is None else len(completion.entropy)
    if request.score_temperatures:
        at = completion.logq_at
        lengths["logq_at"] = -1 if at is None else len(at)
        k = len(request.score_temperatures)
        if at is not None and any(len(row) != k for row in at):
            raise EngineError(
                f"engine returned log q at {sorted({len(r) for r in at})} temperatures per token, expected {k}"
            )
    bad = {k: v for k, v in lengths.items() if v != n}
    if bad:
        raise EngineError(f"engine returned wrong lengths {bad} for a request of {n} new tokens")


def check_values(scored: Completion | Proposal, vocab_size: int) -> None:
    """Raise :class:`EngineError` unless every token id of ``scored`` (a completion, or a proposal
    made of one) is in the vocabulary and every log-probability is <= 0 and not NaN."""
    tokens = scored.tokens
    if tokens and (min(tokens) < 0 or max(tokens) >= vocab_size):  # C loops; the Python one only to name it
        t = next(t for t in tokens if not 0 <= t < vocab_size)
        raise EngineError(f"engine returned token id {t} outside the vocabulary [0, {vocab_size})")
    values: dict[str, Sequence[float]] = {"logq": scored.logq, "logp": scored.logp}
    if scored.logq_at is not None:
        values["logq_at"] = [v for row in scored.logq_at for v in row]
    for name, vs in values.items():
        # a NaN makes the sum NaN (values are <= 0 unless max says otherwise, so no inf - inf)
        if vs and (max(vs) > 1e-6 or math.isnan(sum(vs))):
            v = next(v for v in vs if math.isnan(v) or v > 1e-6)
            raise EngineError(f"engine returned {name} value {v}: log-probabilities must be <= 0 and not NaN")
