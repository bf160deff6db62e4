"""HTTP to an SGLang server or router (standard library only): the engine's single
transport ``_call``, its errors, and the server facts read through it.

Behind an SGLang router (``sglang-router``), ``/model_info`` falls back to
``/get_model_info``, and ``/v1/loads`` and ``/server_info`` are read from the router's
workers (``GET /workers``).
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from ...errors import EngineError

_START_HINT = "start it with `bash scripts/sglang_server.sh start` or pass the right --url"


class EngineHTTPError(EngineError):
    """The server answered with an HTTP error status (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EngineUnreachable(EngineError):
    """No answer: connection refused, reset, or closed before the whole response came."""


@dataclass
class ServerStats:
    calls: int = 0
    http_requests: int = 0
    retries: int = 0
    reconnects: int = 0  # waits for the server to come back after a lost connection
    cached_tokens: int = 0
    prompt_tokens: int = 0


class ServerClient:
    """The transport of :class:`~presto_sgl.engines.sglang.http.SGLangEngine`: ``_call(method,
    path, body)`` is the single exchange with the server (the in-process engine replaces
    it); stats are counted thread-safely."""

    def __init__(self, url: str, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"`timeout_s` (={timeout_s!r}) must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.stats = ServerStats()
        self._stats_lock = threading.Lock()
        self._workers: list[str] | None = None  # the router's worker URLs ([]: a server), read once

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """One request to the server at ``self.url``: the engine's single transport."""
        with self._stats_lock:
            self.stats.http_requests += 1
        return http_json(method, self.url + path, body, self.timeout_s)

    def _get_with_fallback(self, path: str, fallback: str) -> Any:
        try:
            return self._call("GET", path)
        except EngineHTTPError as exc:
            if exc.status != 404:
                raise
            return self._call("GET", fallback)

    def _router_workers(self) -> list[str]:
        """The worker URLs when ``self.url`` is an SGLang router (``GET /workers``), else []."""
        if self._workers is None:
            try:
                answer = self._call("GET", "/workers")
            except EngineHTTPError as exc:
                if exc.status != 404:
                    raise
                answer = {}
            workers = answer.get("workers", []) if isinstance(answer, dict) else []
            self._workers = [w["url"] for w in workers if isinstance(w, dict) and w.get("url")]
        return self._workers

    def _server_get(self, path: str) -> list[Any]:
        """``GET path`` from the server, or from each worker when ``self.url`` is a router (404)."""
        try:
            return [self._call("GET", path)]
        except EngineHTTPError as exc:
            if exc.status != 404 or not self._router_workers():
                raise
        return [http_json("GET", url + path, None, self.timeout_s) for url in self._router_workers()]

    def server_loads(self) -> list[dict[str, Any]]:
        """``/v1/loads`` snapshots, one per scheduler (DP rank, router worker): ``num_used_tokens``
        (KV tokens held by running requests), ``token_usage``, ``max_total_num_tokens``,
        ``num_running_reqs``, ``num_waiting_reqs``, ``cache_hit_rate`` (recent window)."""
        return [load for answer in self._server_get("/v1/loads") for load in answer.get("loads", [])]

    def server_info(self) -> dict[str, Any]:
        """``/server_info`` (of the first worker behind a router)."""
        return self._server_get("/server_info")[0]


def http_json(method: str, url: str, body: Any, timeout_s: float) -> Any:
    """One HTTP exchange: the parsed JSON answer (or its text, e.g. ``/health``'s).

    Raises EngineHTTPError on an error status, EngineUnreachable when the connection
    fails, EngineError on a timeout."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:2000]
        if "call_upstream_request_error" in detail:  # sglang-router 0.3.2 cannot reach its worker (HTTP 500)
            raise EngineUnreachable(f"SGLang router {_origin(url)} cannot reach its worker ({detail}); {_START_HINT}") from None
        raise EngineHTTPError(f"SGLang server {url} returned HTTP {exc.code}: {detail}", exc.code) from None
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise EngineError(
                f"SGLang server {url} did not answer within timeout_s={timeout_s:g} s; raise `timeout_s` (--timeout) "
                "for long calls"
            ) from None
        raise EngineUnreachable(f"SGLang server {_origin(url)} is unreachable or not ready ({reason!r}); {_START_HINT}") from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _origin(url: str) -> str:
    """``http://host:port`` of a request URL."""
    return "/".join(url.split("/", 3)[:3])
