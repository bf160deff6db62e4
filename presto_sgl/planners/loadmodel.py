"""The load model of the shared scheduler's concurrent dispatch (:mod:`presto_sgl.scheduler`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..engines.base import Request
from ..offers import Offer


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
