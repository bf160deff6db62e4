"""The score temperatures a server process reads from its environment (both plugins)."""

from __future__ import annotations

import os

from ..wire import DEFAULT_SCORE_TEMPERATURES, SCORE_TEMPERATURES_ENV


def score_temperatures() -> tuple[float, ...]:
    """The server's score temperatures (``PRESTO_SGL_SCORE_TEMPERATURES``; empty: none)."""
    text = os.environ.get(SCORE_TEMPERATURES_ENV, DEFAULT_SCORE_TEMPERATURES).strip()
    return tuple(float(t) for t in text.split(",")) if text else ()
