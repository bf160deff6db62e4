"""Where one run of a method happens, handed to it explicitly (``Method.run(..., context=...)``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..chain.trace import TraceWriter
from .offers import Lane
from .resume import Checkpoint


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """One run's surroundings: ``lane``, its place in a shared scheduler (its calls go to the
    scheduler's rounds; None: the chain calls its engine alone); ``guard``, run before each model
    call (a pool's cancellation of the chain's request: it raises to stop the chain); ``trace``,
    the writer of its records; ``resume``, the checkpoint it goes on from (``trace`` then
    continues that trace)."""

    lane: Lane | None = None
    guard: Callable[[], None] | None = None
    trace: TraceWriter | None = None
    resume: Checkpoint | None = None


ALONE = RunContext()
"""A run on its own: no scheduler, no cancellation, no trace, from the start."""
