"""HTTP to an SGLang server or router (standard library only): the server facts read
through the engine's single transport ``_call`` (:mod:`..server`).

Behind an SGLang router (``sglang-router``), ``/model_info`` falls back to
``/get_model_info``, and ``/v1/loads`` and ``/server_info`` are read from the router's
workers (``GET /workers``).
"""

from __future__ import annotations

from typing import Any

from ..server import EngineHTTPError, ServerEngine


class ServerClient(ServerEngine):
    """The transport of :class:`~presto_sgl.engines.sglang.http.SGLangEngine`: ``_call(method,
    path, body)`` is the single exchange with the server (the in-process engine replaces
    it), with SGLang's router behind it."""

    KIND = "SGLang server"
    START_HINT = "start it with `bash scripts/sglang_server.sh start` or pass the right --url"
    PLUGIN_HINT = (
        "install presto-sgl into the SGLang server's environment and restart it (SGLANG_PLUGINS unset or listing "
        "presto_raw_logprob), e.g. `bash scripts/sglang_server.sh start`"
    )
    GRAMMARS = frozenset({"regex", "json_schema", "ebnf", "structural_tag"})  # SGLang's own sampling params

    def __init__(self, url: str, timeout_s: float, max_retries: int, restart_timeout_s: float) -> None:
        super().__init__(url, timeout_s, max_retries, restart_timeout_s)
        self._workers: list[str] | None = None  # the router's worker URLs ([]: a server), read once

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

    def _health_urls(self) -> list[str]:
        return self._router_workers()

    def _server_get(self, path: str) -> list[Any]:
        """``GET path`` from the server, or from each worker when ``self.url`` is a router (404)."""
        try:
            return [self._call("GET", path)]
        except EngineHTTPError as exc:
            if exc.status != 404 or not self._router_workers():
                raise
        return [self._http("GET", url + path, None) for url in self._router_workers()]

    def server_loads(self) -> list[dict[str, Any]]:
        """``/v1/loads`` snapshots, one per scheduler (DP rank, router worker): ``num_used_tokens``
        (KV tokens held by running requests), ``token_usage``, ``max_total_num_tokens``,
        ``num_running_reqs``, ``num_waiting_reqs``, ``cache_hit_rate`` (recent window)."""
        return [load for answer in self._server_get("/v1/loads") for load in answer.get("loads", [])]

    def server_info(self) -> dict[str, Any]:
        """``/server_info`` (of the first worker behind a router)."""
        return self._server_get("/server_info")[0]
