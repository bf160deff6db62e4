"""A reference engine whose model calls wait at a gate until the test opens it: a chain on it
cannot finish (nor get past the call it is in) before the test has seen what it waits for,
however fast or slow the machine. Used by the serve tests (disconnects, timeouts, keepalives)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType

from presto_sgl.engines.base import Completion, Request
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

HOLD_S = 120.0
"""A gate never opened lets the calls go on after this: a failing test still ends."""


class GatedEngine(ReferenceEngine):
    """``ReferenceEngine(ReferenceLM(32, seed=0))`` (test_serve.py's), its calls held until
    :meth:`open`; ``calling`` is set once a call has reached the gate. ``with engine:`` opens
    the gate on the way out, so no chain is left waiting."""

    def __init__(self, lm: ReferenceLM | None = None) -> None:
        super().__init__(lm if lm is not None else ReferenceLM(32, seed=0))
        self.calling = threading.Event()
        self._open = threading.Event()

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.calling.set()
        self._open.wait(HOLD_S)
        return super().generate(requests)

    def open(self) -> None:
        self._open.set()

    def __enter__(self) -> GatedEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.open()
