"""The shared scheduler: how the chains in flight share one engine (merged calls, or each
chain's own calls capped by the load: :data:`DISPATCH`).

Each chain that needs a model call hands the scheduler an :class:`Offer`: its planner's
candidate requests in order (a decision's draws form one group) and, when the planner
predicts them, the cumulative value V(n) of sending the first n groups (expected
proposals the chain will use: the step rule's carry-over-aware use probability, the path
rules' reaching weights). A round starts when every chain in flight is waiting (or the
oldest has waited ``max_wait_s``); the scheduler picks n_i >= 1 groups of each offer to
maximize predicted transitions per second of the merged call,

    max_{n_i >= 1}  sum_i V_i(n_i) / t(all rows of the call),

greedily (the extension of one offer by one or more groups with the best ratio first,
while the ratio improves: values need not shrink along an offer), with
t the :class:`~presto_sgl.planners.timemodel.CallTimeModel` fitted on the calls the
engine actually ran (every chain's rows together, so the model sees the load). An offer
without values is sent whole (and counts one transition: its first group's). With one
chain waiting the chain's own choice stands (the per-chain cost-aware budget: its rollout
on this same model), so one chain in flight is the per-chain rule. The first calls
explore fixed fractions of every offer, as the per-chain planners do. With the concurrent
dispatch (a server engine) the offers are weighed only from ``share_from`` chains in flight,
by default never (:data:`SHARE_FROM`): each chain plans and calls its engine alone
(:meth:`Lane.sharing`), the per-chain rule, which the measurements found at least as fast.

Exactness: a chain gets a prefix of its own batch with at least its first group (the
decision its walk needs next); which prefix depends only on cuts, predictions and call
times, never on a proposal's content, so every chain is the sequential chain of its keys.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from ..engines.base import Completion, Engine, Request
from ..errors import ConfigError, EngineError
from ..execution.offers import Lane, Offer, Served
from ..fields import integer
from ..planners.timemodel import EXPLORE, CallTimeModel

if TYPE_CHECKING:
    from ..methods import Method

SHARE_FROM: int | None = None
"""Chains in flight from which the concurrent dispatch weighs the chains' offers against the
server's load (:class:`LoadModel`); None (the default): never, each chain plans and calls its
engine alone, the per-chain rule. Measured on the CPU SGLang and vLLM servers
(benchmarks/RESULTS.md, scheduler_load.py): the load cap cost 5-15% of throughput at 2-8 in
flight on SGLang and tied on vLLM, and at 16 in flight it ranged from -14% to +12% from run to
run, so it is opt-in (``share_from``, the CLI's ``--load-cap-from``)."""

DISPATCH = ("merged", "concurrent")
"""``auto`` (the default) picks by the engine (:func:`dispatch_for`). merged: one engine call
per round (engines that run one call at a time: embedded, reference); concurrent: each
chain's chosen rows in a call of its own, at once (servers that batch concurrent calls
continuously: a merged call would hold every chain until the longest row of any chain is
done)."""


class LoadModel:
    """What a continuously batching server costs, for the concurrent dispatch.

    A decode step with R rows in the server takes tau(R) = a + b R (fitted by least squares
    with a, b >= 0 on each call's seconds per decode step, elapsed / max new tokens, against
    the rows in the server while it ran: its own plus the others' at send time). A row of L
    new tokens then costs the server b L seconds of everyone's steps, and the server turns a
    step into used proposals at the rate of the rows it holds. Under load (b R >> a) a
    prefetched row pays only if its use probability u is at least the average one's share:

        u_j >= u_bar * b R / (a + b R) * L_j / L_bar,

    with u_bar and L_bar the running means of the rows sent (use probability: the offer's
    value increment per row; 1 for an offer without values). With no other rows in the
    server the chain's own (rollout) choice stands: one chain in flight is the per-chain
    rule. A chain always sends its first group.
    """

    def __init__(self) -> None:
        self.rows_in_flight = 0
        self._n = 0
        self._sx = self._sy = self._sxx = self._sxy = 0.0
        self.a, self.b = 0.0, 0.0
        self._u_sum, self._l_sum, self._rows = 0.0, 0.0, 0

    def observe(self, offer: Offer, n: int, requests: Sequence[Request], others: int, elapsed: float) -> None:
        steps = max(r.max_new_tokens for r in requests)
        x, y = float(others + len(requests)), elapsed / max(1, steps)
        self._n += 1
        self._sx += x
        self._sy += y
        self._sxx += x * x
        self._sxy += x * y
        var = self._sxx - self._sx * self._sx / self._n
        b = (self._sxy - self._sx * self._sy / self._n) / var if var > 1e-9 else 0.0
        b = max(b, 0.0)
        a = max((self._sy - b * self._sx) / self._n, 0.0)
        self.a, self.b = a, b
        for j in range(n):
            u = 1.0 if offer.values is None else offer.values[j] - (offer.values[j - 1] if j else 0.0)
            for r in offer.groups[j]:
                self._u_sum += u / len(offer.groups[j])
                self._l_sum += r.max_new_tokens
                self._rows += 1

    def cap(self, offer: Offer, others: int) -> int:
        """Groups of ``offer`` to send with ``others`` rows in the server."""
        own = len(offer.groups) if offer.values is None else (offer.preferred or len(offer.groups))
        if offer.values is None or own <= 1 or others == 0 or self._n < 2 or self._rows == 0:
            return own  # nothing to share: no other chain's rows in the server, or no fit yet
        u_bar, l_bar = self._u_sum / self._rows, self._l_sum / self._rows
        n = 1
        for j in range(1, own):
            rows = others + sum(len(g) for g in offer.groups[:j])
            load = self.b * rows / (self.a + self.b * rows) if self.a + self.b * rows > 0 else 0.0
            u = (offer.values[j] - offer.values[j - 1]) / len(offer.groups[j])
            if any(u < u_bar * load * r.max_new_tokens / l_bar for r in offer.groups[j]):
                break
            n = j + 1
        return n


@dataclass
class _Entry:
    offer: Offer
    since: float
    taken: int = 0
    completions: list[Completion] | None = None
    _: KW_ONLY
    elapsed: float = 0.0
    error: BaseException | None = None
    done: bool = False


@dataclass
class SchedulerStats:
    calls: int = 0  # merged engine calls
    offers: int = 0  # chain rounds served
    rows: int = 0  # requests sent
    offered_rows: int = 0  # requests the offers held
    _: KW_ONLY
    call_s: float = 0.0
    chains_per_call: list[int] = field(default_factory=list)
    taken: list[tuple[tuple[int, int], ...]] = field(default_factory=list)  # per call: (groups sent, offered) per chain


class Scheduler:
    """One engine call per round for every chain in flight (module docstring)."""

    def __init__(
        self,
        engine: Engine,  # the backend itself (not a GuardedEngine: the leader's ticket must not stop the others)
        time_model: CallTimeModel | None = None,
        *,
        max_wait_s: float = 0.05,
        explore: Sequence[float] = EXPLORE,
        dispatch: str = "auto",
        share_from: int | None = SHARE_FROM,
    ) -> None:
        if dispatch not in (*DISPATCH, "auto"):
            raise ConfigError("dispatch", dispatch, f"{{dispatch}} (={dispatch!r}) must be one of {DISPATCH} or 'auto'")
        integer(1, "chains in flight", optional="never")("share_from", share_from)
        self.share_from = share_from
        self.dispatch = dispatch_for(engine) if dispatch == "auto" else dispatch
        self.load = LoadModel()
        if not (isinstance(max_wait_s, (int, float)) and 0.0 <= max_wait_s <= 10.0):
            raise ConfigError("max_wait_s", max_wait_s, f"{{max_wait_s}} (={max_wait_s!r}) must be seconds in [0, 10]")
        self.engine = engine
        self.time_model = time_model if time_model is not None else CallTimeModel()
        self.max_wait_s = float(max_wait_s)
        self.explore = tuple(explore)
        self.stats = SchedulerStats()
        self._cv = threading.Condition()
        self._active = 0
        self._pending: list[_Entry] = []
        self._busy = False

    @classmethod
    def for_method(cls, method: Method, backend: Engine | None = None, **options: Any) -> Scheduler:
        """A scheduler for the chains of ``method``, calling ``backend`` (default: the method's
        engine; of a GuardedEngine, pass its ``inner`` one: the leader's ticket must not stop the
        others), on its planner's call-time model when it has one (so a chain's own choice, used
        when it runs alone, sees the merged calls too)."""
        planner = method.planner
        engine = backend if backend is not None else method.engine
        return cls(engine, planner.time_model if planner is not None else None, **options)

    def adopt(self, method: Method) -> None:
        """Make ``method``'s planner plan on this scheduler's call-time model (a method made
        after the scheduler: serve's per-config samplers), if it plans on one."""
        if method.planner is not None:
            method.planner.use_time_model(self.time_model)

    @contextmanager
    def chain(self, check: Callable[[], None] | None = None) -> Iterator[Lane]:
        """One chain in flight for the body: its :class:`Lane` (``check``: run before each of its
        calls). A round waits for every chain in flight (or ``max_wait_s``)."""
        with self._cv:
            self._active += 1
        try:
            yield Lane(self.submit, check, self.sharing)
        finally:
            with self._cv:
                self._active -= 1
                self._cv.notify_all()

    def sharing(self) -> bool:
        """Whether the chains' offers are weighed now: always with the merged dispatch (one call
        per round for every chain), from ``share_from`` chains in flight with the concurrent one
        (:data:`SHARE_FROM`; below it, or with None, each chain plans and calls alone: the
        per-chain rule)."""
        if self.dispatch == "merged":
            return True
        return self.share_from is not None and self._active >= self.share_from

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        """Every request, in the next round (a call the chain cannot split: extensions, scoring)."""
        if not requests:
            return []
        _, completions, _ = self.submit(Offer((tuple(requests),)))
        return completions

    def submit(self, offer: Offer) -> Served:
        """Serve ``offer``: (groups taken, their completions in order, the call's seconds)."""
        if self.dispatch == "concurrent":
            return self._concurrent(offer)
        entry = _Entry(offer, time.monotonic())
        with self._cv:
            self._pending.append(entry)
            self._cv.notify_all()
            while not entry.done:
                if self._busy or not self._pending:
                    self._cv.wait()
                    continue
                waited = time.monotonic() - self._pending[0].since
                if len(self._pending) < self._active and waited < self.max_wait_s:
                    self._cv.wait(self.max_wait_s - waited)
                    continue
                batch, self._pending, self._busy = self._pending, [], True
                self._cv.release()
                try:
                    self._serve(batch)
                finally:
                    self._cv.acquire()
                    self._busy = False
                    self._cv.notify_all()
        if entry.error is not None:
            raise entry.error
        assert entry.completions is not None
        return entry.taken, entry.completions, entry.elapsed

    def _serve(self, batch: list[_Entry]) -> None:
        """Choose, call once, hand every entry its completions (or the call's error)."""
        try:
            taken = self.choose([e.offer for e in batch])
            requests = [r for e, n in zip(batch, taken) for g in e.offer.groups[:n] for r in g]
            t0 = time.perf_counter()
            completions = self.engine.generate(requests)
            elapsed = time.perf_counter() - t0
            if len(completions) != len(requests):
                raise EngineError(f"engine returned {len(completions)} results for {len(requests)} requests")
            self.time_model.observe([r.max_new_tokens for r in requests], elapsed)
            self._count([e.offer for e in batch], taken, len(requests), elapsed)
            j = 0
            for e, n in zip(batch, taken):
                rows = sum(len(g) for g in e.offer.groups[:n])
                e.taken, e.completions, e.elapsed = n, completions[j : j + rows], elapsed
                j += rows
        except BaseException as exc:  # every waiting chain sees the call's failure
            for e in batch:
                e.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for e in batch:
                e.done = True

    def choose(self, offers: Sequence[Offer]) -> list[int]:
        """Groups taken of each offer (module docstring)."""
        if len(offers) == 1:
            o = offers[0]
            return [len(o.groups) if o.values is None else (o.preferred or len(o.groups))]
        full = [len(o.groups) if o.values is None else 1 for o in offers]
        calls = self.time_model.calls
        if calls < len(self.explore):
            f = self.explore[calls]
            return [n if o.values is None else max(1, math.ceil(f * len(o.groups))) for o, n in zip(offers, full)]
        taken = list(full)
        rows = sorted(r.max_new_tokens for o, n in zip(offers, taken) for g in o.groups[:n] for r in g)
        top: tuple[int, ...]  # (second most, most) new tokens of a row
        tp: tuple[int, ...]
        count, tokens, top = len(rows), sum(rows), (rows[-2] if len(rows) > 1 else 0, rows[-1])
        value = sum(o.values[n - 1] if o.values is not None else 1.0 for o, n in zip(offers, taken))
        rate = value / self.time_model.time(count, top[1], tokens, top[0])
        while True:
            best = None  # (rate, chain, groups added, rows, tokens, (second most, most) new tokens)
            for i, o in enumerate(offers):
                if o.values is None:
                    continue
                c, tk, tp = count, tokens, top
                for m in range(taken[i], len(o.groups)):  # extend chain i to m + 1 groups
                    new = [r.max_new_tokens for r in o.groups[m]]
                    c, tk, tp = c + len(new), tk + sum(new), tuple(sorted((*tp, *new))[-2:])
                    r = (value + o.values[m] - o.values[taken[i] - 1]) / self.time_model.time(c, tp[1], tk, tp[0])
                    if best is None or r > best[0]:
                        best = (r, i, m + 1, c, tk, tp)
            if best is None or best[0] <= rate:
                return taken
            rate, i, n, count, tokens, top = best
            values = offers[i].values
            assert values is not None  # best only names offers with values
            value += values[n - 1] - values[taken[i] - 1]
            taken[i] = n

    def _concurrent(self, offer: Offer) -> tuple[int, list[Completion], float]:
        """The offer's rows in a call of its own, capped by the load (:meth:`LoadModel.cap`)."""
        with self._cv:
            others = self.load.rows_in_flight
            n = self.load.cap(offer, others)
            requests = [r for g in offer.groups[:n] for r in g]
            self.load.rows_in_flight += len(requests)
        t0 = time.perf_counter()
        try:
            completions = self.engine.generate(requests)
        finally:
            elapsed = time.perf_counter() - t0
            with self._cv:
                self.load.rows_in_flight -= len(requests)
        # (the Recorder checks the completions against the requests)
        self.time_model.observe([r.max_new_tokens for r in requests], elapsed)  # the chain's own call, as it planned
        with self._cv:
            self.load.observe(offer, n, requests, others, elapsed)
            self._count([offer], [n], len(requests), elapsed)
        return n, completions, elapsed

    def _count(self, offers: Sequence[Offer], taken: Sequence[int], rows: int, elapsed: float) -> None:
        s = self.stats
        s.calls += 1
        s.offers += len(offers)
        s.rows += rows
        s.offered_rows += sum(len(g) for o in offers for g in o.groups)
        s.call_s += elapsed
        s.chains_per_call.append(len(offers))
        s.taken.append(tuple((n, len(o.groups)) for o, n in zip(offers, taken)))


def dispatch_for(engine: object) -> str:
    """``concurrent`` for a server engine (it batches concurrent calls), else ``merged``."""
    from ..engines.server import ServerEngine

    return "concurrent" if isinstance(engine, ServerEngine) else "merged"
