"""The chains in flight: a bounded pool of worker threads, one chain each, sharing one backend.

The one chain pool of the package: ``presto-sgl run`` (a dataset's prompts), ``serve``
(requests) and :func:`presto_sgl.scheduling.runner.run_prompts` (the library's many-prompt helper) all
run their chains here; ``power_gen`` chains run on the threads of SGLang's program interpreter.

Admission is all or nothing per request: its chains are admitted when running + waiting
chains stay within ``concurrency + queue_size``, else the request is refused (HTTP 429)
before anything runs. Every chain carries its request's :class:`Ticket`, handed to it
explicitly as its run context's ``guard`` (:class:`~presto_sgl.execution.context.RunContext`)
and checked before every model call of the chain. A cancelled ticket (client gone, deadline
passed, server shutting down) so stops its chains at their next model call, and a chain
still waiting never starts: no chain outlives its request by more than one model call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..engines.base import Completion, Engine, EngineCapabilities, Request
from ..engines.text import TextView
from ..execution.context import RunContext
from ..fields import integer
from .scheduler import Scheduler


class Cancelled(Exception):
    """A chain stopped because its request was cancelled (``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"chain cancelled: {reason}")
        self.reason = reason


class Ticket:
    """One request's cancellation: ``cancel(reason)``, or the ``deadline`` (monotonic s) passing."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.reason: str | None = None
        self._event = threading.Event()

    def cancel(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the request was cancelled or its deadline passed."""
        if not self._event.is_set() and time.monotonic() >= self.deadline:
            self.cancel("timeout")
        if self._event.is_set():
            raise Cancelled(self.reason or "cancelled")


class GuardedEngine:
    """The backend, seen by the chains of a pool: counts their calls; the backend itself is
    ``inner``. (A chain's cancellation is its run context's guard, checked before each call.)"""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities

    @property
    def text(self) -> TextView:
        return self.inner.text

    def count(self) -> None:
        """One model call."""
        with self._lock:
            self.calls += 1

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.count()
        return self.inner.generate(requests)


@dataclass
class PoolStats:
    running: int = 0
    queued: int = 0
    completed: int = 0
    cancelled: int = 0
    _: KW_ONLY
    failed: int = 0
    refused: int = 0  # chains of requests refused because the queue was full


class ChainPool:
    """``concurrency`` chains run at once; up to ``queue_size`` more wait their turn. A chain is
    called as ``chain(context=...)`` (hand the :class:`~presto_sgl.execution.context.RunContext` to
    the method's ``run``): its guard is the request's ticket; with a ``scheduler``, its lane sends
    the chain's model calls through the scheduler, one engine call per round, after the ticket's
    check and the count of ``submit``'s ``guard`` (the scheduler calls the backend itself)."""

    def __init__(self, concurrency: int, queue_size: int, scheduler: Scheduler | None = None) -> None:
        integer(1, "chains at once")("concurrency", concurrency)
        integer(0, "chains waiting")("queue_size", queue_size)
        self.concurrency = concurrency
        self.queue_size = queue_size
        self.stats = PoolStats()
        self.scheduler = scheduler
        self._lock = threading.Lock()
        self._tickets: dict[Ticket, int] = {}  # the requests in flight: chains not yet finished
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="presto-chain")

    @property
    def capacity(self) -> int:
        return self.concurrency + self.queue_size

    def submit(
        self, ticket: Ticket, chains: Sequence[Callable[..., Any]], guard: GuardedEngine | None = None
    ) -> list[Future] | None:
        """Start every chain under ``ticket``, or None (nothing started) when they do not fit;
        ``guard``: the GuardedEngine the chains' methods call (its check runs before each call
        that goes through the scheduler instead)."""
        with self._lock:
            if self.stats.running + self.stats.queued + len(chains) > self.capacity:
                self.stats.refused += len(chains)
                return None
            self.stats.queued += len(chains)
            self._tickets[ticket] = self._tickets.get(ticket, 0) + len(chains)
        return [self._executor.submit(self._run, ticket, chain, guard) for chain in chains]

    def _run(self, ticket: Ticket, chain: Callable[..., Any], guard: GuardedEngine | None) -> Any:
        with self._lock:
            self.stats.queued -= 1
            self.stats.running += 1
        outcome = "failed"

        def scheduled() -> None:  # before each call the scheduler makes for the chain (on the backend itself)
            ticket.check()
            if guard is not None:
                guard.count()

        try:
            ticket.check()  # a chain whose request is gone never starts
            if self.scheduler is None:
                result = chain(context=RunContext(guard=ticket.check))
            else:
                with self.scheduler.chain(scheduled) as lane:
                    result = chain(context=RunContext(lane=lane, guard=ticket.check))
            outcome = "completed"
            return result
        except Cancelled:
            outcome = "cancelled"
            raise
        finally:
            with self._lock:
                self.stats.running -= 1
                setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
                self._tickets[ticket] -= 1
                if not self._tickets[ticket]:
                    del self._tickets[ticket]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {**self.stats.__dict__, "concurrency": self.concurrency, "queue_size": self.queue_size}

    def close(self) -> None:
        """Cancel every request's chains (server shutdown) and wait for the threads."""
        with self._lock:
            tickets = list(self._tickets)
        for t in tickets:
            t.cancel("shutdown")
        self._executor.shutdown(wait=True, cancel_futures=False)
