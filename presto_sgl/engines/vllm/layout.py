"""How the one-pass plugin packs its per-token fields into vLLM's logprobs (standard library only).

vLLM returns, per output token, the sampled token's log-probability and a dict of "top"
entries keyed by token id. With the plugin (:mod:`.plugin`), a request that asks for
``logprobs = width(m)`` gets, per output token with sampled id s in a vocabulary of V:
- the sampled entry: log p0(s), raw (before temperature);
- top entry i (i = 0, 1, ...) under the token id (s + 1 + i) mod V, never s itself:
  0: SIGNATURE + m, where m is the number of score temperatures (a stock server's
     logprobs are <= 0, so a positive value proves the plugin);
  1: log q_T(s) at the request's own temperature T, from the same logits row;
  2: the p0 entropy at this position;
  3 .. 3+m-1: the score temperatures t_1..t_m;
  3+m .. 3+2m-1: the log-normalizers Z_t = log sum_u p0(u)^(1/t).
Then log q_t(s) = log p0(s) / t - Z_t (MultiTryMH's temperature mixture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SIGNATURE = 10000.0
FIXED = 3  # signature, log q at the request's temperature, entropy


def width(m: int) -> int:
    """The ``logprobs`` count that carries every field for m score temperatures."""
    return FIXED + 2 * m


def field_ids(sampled: int, n: int, vocab_size: int) -> list[int]:
    """Token ids under which the first n fields travel."""
    return [(sampled + 1 + i) % vocab_size for i in range(n)]


@dataclass(frozen=True)
class Fields:
    """One output token as the plugin reports it."""

    token: int
    logp: float
    logq: float
    entropy: float
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
    return Fields(sampled, logp, vals[1], vals[2], tuple(vals[FIXED : FIXED + m]), tuple(vals[FIXED + m :]))
