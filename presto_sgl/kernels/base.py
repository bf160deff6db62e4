"""The MH kernel seam: what a suffix-resampling sampler says about one decision.

The paper's three samplers (PowerMH, EntropyCut, MultiTryMH) are MH kernels over the
same immutable :class:`~presto_sgl.chain.state.ChainState`. Per decision -- its randomness
fixed by its key (:class:`~presto_sgl.chain.keys.DecisionDraws`) -- a kernel says

1. its **cut**: where the state is cut (``cut``), and, for prefetching, the cut it takes
   at *any* state that keeps the round root's first ``shared`` tokens (``prefetch_cut``;
   None when that is not decided by the shared prefix, or lies beyond it -- Condition 1);
2. the **draws** it needs at that cut: one suffix (PowerMH, EntropyCut) or several
   candidates and reference draws (MultiTryMH), all after the same kept prefix, with
   what each must return beside log q and log p0 (entropy, log q at other temperatures);
3. the **decision** from the scored draws: the new state or the old one (``decide``),
   with log A and the uniform used. Each kernel computes its acceptance in one
   log-space function.

Sequential execution and PreSTO prefetching (every planner) drive any kernel through
these three methods and nothing else (docs/design.md §3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol

from ..chain.keys import DecisionDraws
from ..chain.state import ChainState
from ..fields import Validated


@dataclass(frozen=True)
class SuffixDraw:
    """One engine draw of a decision: ``length - cut`` tokens from q at ``temperature``."""

    temperature: float
    seed: int  # unique per draw: derived from the decision's key
    entropy: bool = False  # the kernel needs the p0 entropy of every drawn token
    score_temperatures: tuple[float, ...] = ()  # also log q of every drawn token at these temperatures


@dataclass(frozen=True)
class Proposal:
    """A scored suffix drawn after keeping ``cut`` response tokens of a state."""

    cut: int
    tokens: tuple[int, ...]
    logq: tuple[float, ...]
    logp: tuple[float, ...]
    _: KW_ONLY
    entropy: tuple[float, ...] | None = None
    logq_at: tuple[tuple[float, ...], ...] | None = None  # per token, log q at the score temperatures


@dataclass(frozen=True)
class Transition:
    """Diagnostics of one MH transition (travel beside the state, never inside it)."""

    cut: int
    log_accept: float
    uniform: float
    accepted: bool
    _: KW_ONLY
    selected: int = 0  # the draw proposed, among the decision's (MultiTryMH: the selected try)


class Kernel(Protocol):
    """A suffix-resampling MH kernel leaving pi_alpha(x) ∝ p0(x)^alpha invariant."""

    @property
    def name(self) -> str: ...

    @property
    def needs_entropy(self) -> bool:
        """States must carry per-token p0 entropy (the engine must return it)."""
        ...

    @property
    def score_temperatures(self) -> tuple[float, ...]:
        """States carry per-token log q at these temperatures (empty: none)."""
        ...

    @property
    def ends(self) -> bool:
        """The EOS-terminated target (docs/design.md §2.1): a draw runs to its own stop token,
        so a proposal has any length >= 1, and the cut law is over the current length. A kernel
        with an EOS-terminated form has a dataclass field ``ends`` (``make_kernel`` sets it);
        one without answers False."""
        ...

    def cut(self, state: ChainState, draws: DecisionDraws) -> int:
        """The decision's cut c in {0..T-1} at ``state``."""
        ...

    def prefetch_cut(self, root: ChainState, shared: int, draws: DecisionDraws) -> int | None:
        """The cut the decision takes at every state whose first ``shared`` response tokens
        (with their per-token values) are the root's, if it is decided by them and is at
        most ``shared`` (so the request's prefix is a prefix of the root); else None."""
        ...

    def suffix_draws(self, cut: int, length: int, draws: DecisionDraws) -> tuple[SuffixDraw, ...]:
        """The engine draws the decision needs at ``cut``, in the order ``decide`` reads them."""
        ...

    def decide(
        self, state: ChainState, proposals: Sequence[Proposal], draws: DecisionDraws
    ) -> tuple[ChainState, Transition]:
        """The MH transition of ``state`` given the scored draws at the decision's cut."""
        ...


@dataclass(frozen=True)
class KernelSpec:
    """A kernel's registry entry (:mod:`presto_sgl.registry`): its name, the frozen dataclass of
    its own parameters (fields by :func:`~presto_sgl.fields.option`), how to make it from
    (alpha, tau, params), and one line for ``--method``'s help."""

    name: str
    params: type[Validated]
    make: Callable[[float, float, Any], Kernel]
    doc: str
