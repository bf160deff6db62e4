"""A counting loopback HTTP proxy in front of one server: the wire's own count of what the
server answered, to hold against what each chain's trace says it asked.

Every request is forwarded unchanged. For each ``/generate`` body the server answered
(HTTP 200), every item is counted under its chain -- the prompt its ``input_ids`` begin
with -- as ``(len(input_ids), max_new_tokens)``, with the ``cached_tokens`` the server
reported. When the server cannot be reached or drops the connection mid-answer, the
proxy drops the client's connection too (the client sees what it would see without the
proxy) and counts the body as ``lost``.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


def asked(records: Iterable[dict[str, Any]]) -> Counter[tuple[int, int]]:
    """The (prefix length, new tokens) multiset of the requests a trace's call records made."""
    return Counter((r["prefix_len"], r["new_tokens"]) for c in records if c["type"] == "call" for r in c["requests"])


class Wiretap:
    """``with Wiretap(upstream, prompts) as tap:`` point the client at ``tap.url``.

    ``prompts``: the chains' prompt token ids (distinct, none a prefix of another); an item
    whose ``input_ids`` begin with ``prompts[i]`` is chain ``i``'s.
    """

    def __init__(self, upstream: str, prompts: Sequence[Sequence[int]], timeout_s: float = 900.0) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.prompts = [tuple(p) for p in prompts]
        self.timeout_s = timeout_s
        self.answered: Counter[tuple[int, int, int]] = Counter()  # (chain, prefix_len, new_tokens)
        self.cached: Counter[int] = Counter()  # chain: cached prompt tokens the server reported
        self.prompt_tokens: Counter[int] = Counter()  # chain: prompt tokens sent
        self.foreign = 0  # answered items of no listed chain (probes)
        self.lost = 0  # /generate bodies whose answer never came back
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Wiretap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def chain_of(self, ids: Sequence[int]) -> int | None:
        head = tuple(ids)
        for i, p in enumerate(self.prompts):
            if head[: len(p)] == p:
                return i
        return None

    def per_chain(self) -> dict[int, Counter[tuple[int, int]]]:
        """chain: multiset of (prefix_len, new_tokens) answered."""
        out: dict[int, Counter[tuple[int, int]]] = {}
        for (chain, plen, new), n in self.answered.items():
            out.setdefault(chain, Counter())[(plen, new)] += n
        return out

    def _count(self, body: dict[str, Any], answer: Any) -> None:
        ids = body.get("input_ids") or []
        params = body.get("sampling_params")
        if not ids or not isinstance(ids[0], list):
            ids, params, answer = [ids], [params], [answer]
        if not isinstance(params, list):
            params = [params] * len(ids)
        with self._lock:
            for item, p, res in zip(ids, params, answer, strict=True):
                chain = self.chain_of(item)
                if chain is None:
                    self.foreign += 1
                    continue
                self.answered[(chain, len(item), int((p or {}).get("max_new_tokens", 0)))] += 1
                self.cached[chain] += int(res.get("meta_info", {}).get("cached_tokens", 0))
                self.prompt_tokens[chain] += len(item)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(size) if size else None
                generate = self.command == "POST" and self.path.startswith("/generate")
                try:
                    conn = http.client.HTTPConnection(*tap.upstream, timeout=tap.timeout_s)
                    conn.request(
                        self.command,
                        self.path,
                        body=data,
                        headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
                    )
                    resp = conn.getresponse()
                    payload = resp.read()
                    conn.close()
                except (OSError, http.client.HTTPException):  # the server is gone: so is the client's answer
                    if generate:
                        with tap._lock:
                            tap.lost += 1
                    self.close_connection = True
                    self.connection.close()
                    return
                if generate and resp.status == 200 and data:
                    tap._count(json.loads(data), json.loads(payload))
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _forward

        return Handler
