"""The one-pass plugin's fields read back from vLLM's logprobs (standard library only).

The plugin (:mod:`presto_sgl.server_side.vllm.plugin`) packs, per output token, raw log p0,
log q at the request's temperature, the p0 entropy, the score temperatures and their
log-normalizers into the logprobs vLLM returns; the layout is :mod:`presto_sgl.wire`'s.
Then log q_t(s) = log p0(s) / t - Z_t (MultiTryMH's temperature mixture).
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

from ...wire import FIXED, SIGNATURE, field_ids, width


@dataclass(frozen=True)
class Fields:
    """One output token as the plugin reports it."""

    token: int
    logp: float
    logq: float
    entropy: float
    _: KW_ONLY
    temperatures: tuple[float, ...]
    lognorm: tuple[float, ...]

    def logq_at(self, wanted: tuple[float, ...]) -> tuple[float, ...] | None:
        """log q_t(token) at each wanted t, or None when the server does not score at one of them."""
        out = []
        for t in wanted:
            match = [i for i, s in enumerate(self.temperatures) if math.isclose(s, t, rel_tol=1e-9)]
            if not match:
                return None
            out.append(self.logp / t - self.lognorm[match[0]])
        return tuple(out)


def signature_count(top: dict[int, float], sampled: int, vocab_size: int) -> int | None:
    """m (the server's number of score temperatures) when ``top`` carries the plugin's
    signature, else None (a stock server)."""
    v = top.get(field_ids(sampled, 1, vocab_size)[0])
    if v is None or not v >= SIGNATURE or v != v:
        return None
    m = v - SIGNATURE
    return int(m) if m == int(m) and m >= 0 else None


def parse_fields(sampled: int, logp: float, top: dict[int, float], vocab_size: int) -> Fields | None:
    """The plugin's fields of one output token, or None when missing or malformed."""
    m = signature_count(top, sampled, vocab_size)
    if m is None:
        return None
    ids = field_ids(sampled, width(m), vocab_size)
    if any(i not in top for i in ids):
        return None
    vals = [top[i] for i in ids]
    return Fields(
        sampled, logp, vals[1], vals[2], temperatures=tuple(vals[FIXED : FIXED + m]), lognorm=tuple(vals[FIXED + m :])
    )
