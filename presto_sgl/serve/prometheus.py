"""Prometheus text exposition (``GET /metrics``) of the endpoint: requests by endpoint and
status, the pool's queue and running chains, and the chains' transitions, model calls,
accepted proposals and model-call time (so transitions per call, acceptance rate and mean
model-call latency are ratios of counters, as Prometheus computes them)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

PREFIX = "presto_sgl"


class Metrics:
    """Counters the app updates; :meth:`render` writes them with the pool's gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._chains = Counter({"transitions": 0, "model_calls": 0, "accepted": 0, "call_seconds": 0.0, "chains": 0})

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self._requests[(endpoint, status)] += 1

    def chain(self, metrics: Any) -> None:
        """A finished chain's :class:`~presto_sgl.chain.metrics.PromptMetrics`."""
        with self._lock:
            self._chains.update(
                {
                    "transitions": metrics.transitions,
                    "model_calls": metrics.model_calls,
                    "accepted": metrics.accepted,
                    "call_seconds": metrics.call_time_s,
                    "chains": 1,
                }
            )

    def render(self, pool: dict[str, int]) -> str:
        with self._lock:
            requests, chains = dict(self._requests), dict(self._chains)
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.extend([f"# HELP {PREFIX}_{name} {help_}", f"# TYPE {PREFIX}_{name} {kind}"])
            lines.extend(f"{PREFIX}_{name}{labels} {value:g}" for labels, value in samples)

        metric(
            "requests_total",
            "counter",
            "HTTP requests answered, by endpoint and status code",
            [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in sorted(requests.items())],
        )
        metric("queue_depth", "gauge", "chains waiting for a free slot", [("", pool.get("queued", 0))])
        metric("chains_running", "gauge", "chains running now", [("", pool.get("running", 0))])
        for key in ("completed", "cancelled", "failed", "refused"):
            metric(f"chains_{key}_total", "counter", f"chains {key}", [("", pool.get(key, 0))])
        metric("transitions_total", "counter", "MH transitions of finished chains", [("", chains["transitions"])])
        metric(
            "model_calls_total",
            "counter",
            "model calls of finished chains (transitions per call = transitions_total / model_calls_total)",
            [("", chains["model_calls"])],
        )
        metric(
            "accepted_total",
            "counter",
            "accepted MH proposals (acceptance rate = accepted_total / transitions_total)",
            [("", chains["accepted"])],
        )
        metric(
            "model_call_seconds_total",
            "counter",
            "cumulative model-call time of finished chains (mean latency "
            "= model_call_seconds_total / model_calls_total)",
            [("", chains["call_seconds"])],
        )
        return "\n".join(lines) + "\n"
