"""The plugin's score-temperature output as the client reads it (standard library only).

The one-pass plugin (:mod:`presto_sgl.server_side.sglang.plugin`) returns, per output token, the log-normalizers
Z_t = log sum_u p0(u)^(1/t) at the server's score temperatures under the key
``masked_lognorm@T1,T2,...``; with log p0 of the token from the same logits row,
log q_t(token) = log p0(token) / t - Z_t (MultiTryMH's temperature mixture).
"""

from __future__ import annotations

import math
from typing import Any

from ...wire import LOGNORM_KEY

Lognorm = tuple[tuple[float, ...], list[list[float]]]


def parse_lognorm(meta: dict[str, Any], n: int) -> Lognorm | None:
    """(score temperatures, per-token log-normalizers) from the plugin's ``masked_lognorm@T1,...``
    key, or None when absent or malformed."""
    for key, rows in meta.items():
        if key.startswith(LOGNORM_KEY):
            try:
                temps = tuple(float(t) for t in key[len(LOGNORM_KEY) :].split(","))
            except ValueError:
                return None
            if (
                isinstance(rows, list)
                and len(rows) == n
                and all(isinstance(r, list) and len(r) == len(temps) for r in rows)
            ):
                return temps, rows
            return None
    return None


def logq_at(
    logp: tuple[float, ...], lognorm: Lognorm | None, wanted: tuple[float, ...]
) -> tuple[tuple[float, ...], ...] | None:
    """log q_t(token) = log p0(token) / t - log sum_u p0(u)^(1/t) at each wanted t (None when
    the server did not return them: the completion then fails validation, an EngineError)."""
    if not wanted or lognorm is None:
        return None
    temps, rows = lognorm
    cols = []
    for t in wanted:
        match = [i for i, s in enumerate(temps) if math.isclose(s, t, rel_tol=1e-9)]
        if not match:
            return None
        cols.append((t, match[0]))
    return tuple(tuple(lp / t - _number(row[i]) for t, i in cols) for lp, row in zip(logp, rows, strict=True))


def _number(x: Any) -> float:
    return math.nan if x is None else float(x)
