"""The progress line of ``presto-sgl sample``: one self-overwriting status line on stderr."""

from __future__ import annotations

import time
from typing import TextIO

from ..chain.state import ChainState
from ..kernels import Transition
from ..scheduling.pool import GuardedEngine
from .common import PROG


class Progress:
    """A single self-overwriting status line on ``stream`` (stderr); an ``on_transition`` callback."""

    def __init__(self, stream: TextIO, engine: GuardedEngine, total: int, min_interval: float = 0.1) -> None:
        self.stream = stream
        self.engine = engine
        self.total = total
        self.min_interval = min_interval
        self.done = 0
        self.accepted = 0
        self.mh_calls = 0
        self._last = float("-inf")
        self._width = 0
        self._shown = False

    def __call__(self, stage: int, k: int, state: ChainState, transition: Transition) -> None:
        self.done += 1
        self.accepted += bool(transition.accepted)
        # The extension that opens stage s precedes its transitions; those of later
        # stages come after, so MH calls so far = all calls - ``stage`` extensions.
        self.mh_calls = self.engine.calls - stage
        now = time.monotonic()
        if self.done >= self.total or now - self._last >= self.min_interval:
            self._last = now
            self._draw()

    def _draw(self) -> None:
        rate = self.accepted / self.done if self.done else 0.0
        line = (
            f"{PROG}: transitions {self.done}/{self.total}  model calls {self.mh_calls}  acceptance {100 * rate:.1f}%"
        )
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the status line (newline) if anything was drawn."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
