"""Server-side metrics of a run: KV-pool use and prefix hits, sampled in the background.

:class:`ServerMonitor` polls :meth:`SGLangEngine.server_loads` (``/v1/loads``; behind a
router, each worker's) every ``interval_s`` from a daemon thread while a ``with`` block
runs, and summarizes it as one ``server`` trace record. Peaks are of the samples: calls
shorter than the interval can fall between two of them. Polls that fail (e.g. during a
server restart) are counted as ``missed`` and never fail the run. The prefix hit rate is
the client's own count over the block: cached prompt tokens / prompt tokens of every
decode request, from the engine's stats.
"""

from __future__ import annotations

import threading
import time
from dataclasses import KW_ONLY, asdict, dataclass
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from ..errors import ConfigError, EngineError


class _Stats(Protocol):
    cached_tokens: int
    prompt_tokens: int
    reconnects: int


class LoadSource(Protocol):
    """What the monitor reads from an engine (SGLang's or vLLM's server engine)."""

    url: str

    @property
    def stats(self) -> _Stats: ...

    def server_loads(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ServerSummary:
    """What the server did during a monitored block (sums over schedulers per sample)."""

    url: str
    interval_s: float
    duration_s: float
    samples: int
    _: KW_ONLY
    missed: int  # polls that failed (server restarting, endpoint missing)
    kv_capacity: int  # max_total_num_tokens
    kv_tokens_peak: int  # num_used_tokens: KV tokens held by running requests
    kv_tokens_mean: float
    kv_usage_peak: float  # kv_tokens / kv_capacity
    kv_usage_mean: float
    running_requests_max: int
    waiting_requests_max: int
    server_cache_hit_rate: float  # mean of /v1/loads cache_hit_rate (the server's recent window)
    prompt_tokens: int  # client side, decode requests in the block
    cached_tokens: int
    prefix_hit_rate: float  # cached_tokens / prompt_tokens
    reconnects: int

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


class ServerMonitor:
    """``with engine.monitor() as mon: ...`` then ``mon.summary()``."""

    def __init__(self, engine: LoadSource, interval_s: float = 0.25) -> None:
        if not interval_s > 0:
            raise ConfigError(
                "interval_s", interval_s, f"{{interval_s}} (={interval_s!r}) must be > 0 seconds, e.g. 0.25"
            )
        self.engine = engine
        self.interval_s = float(interval_s)
        self._samples: list[tuple[int, int, int, int, float]] = []  # used, capacity, running, waiting, hit rate
        self._missed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_stats = (0, 0, 0)
        self._t0 = self._t1 = 0.0

    def __enter__(self) -> Self:
        s = self.engine.stats
        self._start_stats = (s.prompt_tokens, s.cached_tokens, s.reconnects)
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="presto-sgl-server-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._t1 = time.monotonic()
        self._poll()  # the state at the end of the block

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.interval_s)

    def _poll(self) -> None:
        try:
            loads = self.engine.server_loads()
        except EngineError:
            self._missed += 1
            return
        if not loads:
            self._missed += 1
            return
        self._samples.append(
            (
                sum(int(x.get("num_used_tokens", 0)) for x in loads),
                sum(int(x.get("max_total_num_tokens", 0)) for x in loads),
                sum(int(x.get("num_running_reqs", 0)) for x in loads),
                sum(int(x.get("num_waiting_reqs", 0)) for x in loads),
                sum(float(x.get("cache_hit_rate", 0.0)) for x in loads) / len(loads),
            )
        )

    def summary(self) -> ServerSummary:
        """The block's summary (call after the ``with`` block)."""
        samples = self._samples
        n = len(samples)
        used = [u for u, *_ in samples]
        capacity = max((c for _, c, *_ in samples), default=0)
        s = self.engine.stats
        prompt = s.prompt_tokens - self._start_stats[0]
        cached = s.cached_tokens - self._start_stats[1]
        return ServerSummary(
            url=self.engine.url,
            interval_s=self.interval_s,
            duration_s=self._t1 - self._t0,
            samples=n,
            missed=self._missed,
            kv_capacity=capacity,
            kv_tokens_peak=max(used, default=0),
            kv_tokens_mean=sum(used) / n if n else 0.0,
            kv_usage_peak=max(used, default=0) / capacity if capacity else 0.0,
            kv_usage_mean=sum(used) / n / capacity if capacity and n else 0.0,
            running_requests_max=max((r for _, _, r, _, _ in samples), default=0),
            waiting_requests_max=max((w for *_, w, _ in samples), default=0),
            server_cache_hit_rate=sum(h for *_, h in samples) / n if n else 0.0,
            prompt_tokens=prompt,
            cached_tokens=cached,
            prefix_hit_rate=cached / prompt if prompt else 0.0,
            reconnects=s.reconnects - self._start_stats[2],
        )


@runtime_checkable
class Monitored(Protocol):
    """An engine whose server can be monitored (SGLang's and vLLM's server engines)."""

    def monitor(self, interval_s: float = 0.25) -> ServerMonitor: ...
