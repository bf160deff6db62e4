"""The ASGI app (Starlette): ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``, ``/health``.

A request is parsed and its prompts tokenized before any chain starts (400 naming the
field), admitted whole or refused (429, ``Retry-After``), then awaited while the
handler polls for the client going away: a disconnect or the per-request timeout
cancels the request's ticket, which stops its chains at their next model call
(:mod:`.pool`). Backend failures keep the engines' own handling (a lost connection is
redrawn once the server is back, within ``--restart-timeout``); past it the answer is
503, and any other engine error 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import BackendUnavailable, ConfigError, EngineError
from ..pool import Cancelled, Ticket
from .params import ParamError, parse
from .responses import error_body, response, stream_events
from .service import Service

log = logging.getLogger("presto_sgl.serve")


class Failure(Exception):
    """An HTTP error answer: ``status`` and the OpenAI error body's fields."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.headers = status, param, code, headers or {}

    def answer(self) -> JSONResponse:
        return JSONResponse(error_body(self.status, str(self), self.param, self.code), self.status, self.headers)


def _failure(exc: BaseException, timeout_s: float) -> Failure:
    """The HTTP answer for what stopped a chain."""
    if isinstance(exc, Cancelled):
        if exc.reason == "timeout":
            return Failure(504, f"the request did not finish within the server's --request-timeout of {timeout_s:g} s; "
                           "ask for fewer tokens or steps, or raise --request-timeout", code="timeout")
        if exc.reason == "shutdown":
            return Failure(503, "the server is shutting down", code="shutting_down")
        return Failure(499, f"the request was cancelled ({exc.reason})", code=exc.reason)
    if isinstance(exc, BackendUnavailable):
        return Failure(503, f"the backend is unavailable: {exc}", code="backend_unavailable", headers={"Retry-After": "5"})
    if isinstance(exc, EngineError):
        return Failure(502, f"the backend failed: {exc}", code="backend_error")
    log.error("chain failed", exc_info=exc)
    return Failure(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")


async def _await_chains(request: Request, futures: Sequence[asyncio.Future], ticket: Ticket, poll_s: float) -> list[Any]:
    """Every chain's result; the ticket is cancelled on a disconnect, the deadline, or a
    chain's failure (its siblings stop too), and the failure is raised."""
    pending = set(futures)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, timeout=poll_s, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((f.exception() for f in done if f.exception() is not None), None)
            if failed is not None:
                ticket.cancel("failed")
                raise failed
            if pending and await request.is_disconnected():
                ticket.cancel("disconnect")
                raise Cancelled("disconnect")
            if pending and time.monotonic() >= ticket.deadline:
                ticket.cancel("timeout")
                raise Cancelled("timeout")
        return [f.result() for f in futures]
    except asyncio.CancelledError:  # the server is shutting down: its grace period is over
        ticket.cancel("shutdown")
        raise Cancelled("shutdown") from None  # answered 503 while the connection is still open
    finally:
        for f in pending:  # chains left behind end in Cancelled; nobody waits for it
            f.add_done_callback(lambda f: f.cancelled() or f.exception())


def create_app(service: Service, *, request_timeout_s: float = 600.0, poll_s: float = 0.1) -> Starlette:
    """The app serving ``service``; requests time out after ``request_timeout_s`` (queue time included)."""
    if not request_timeout_s > 0:
        raise ConfigError("request_timeout_s", request_timeout_s, f"{{request_timeout_s}} (={request_timeout_s!r}) must be > 0")

    async def serve(request: Request, kind: str) -> Response:
        try:
            try:
                body = await request.json()
            except ValueError:
                raise Failure(400, "the request body is not valid JSON") from None
            model = body.get("model") if isinstance(body, dict) else None
            if model is not None and model != service.model:
                raise Failure(404, f"the model `{model}` does not exist; this server serves `{service.model}` "
                              "(GET /v1/models)", "model", "model_not_found")
            ticket = Ticket(time.monotonic() + request_timeout_s)
            try:
                job = parse(body, kind, service.defaults)
                seed, prompts, futures = await run_in_threadpool(service.start, job, ticket)
            except ParamError as exc:
                raise Failure(400, str(exc), exc.param) from None
            except Exception as exc:  # a bug: a 500 naming it, logged with its traceback
                raise _failure(exc, request_timeout_s) from None
            if futures is None:
                snap = service.pool.snapshot()
                raise Failure(429, f"the server is at capacity ({snap['running']} chains running, {snap['queued']} "
                              f"waiting, capacity {service.pool.capacity}); retry later", code="server_busy",
                              headers={"Retry-After": "1"})
            try:
                results = await _await_chains(request, [asyncio.wrap_future(f) for f in futures], ticket, poll_s)
                choices = [service.choice(job, i, r) for i, r in enumerate(results)]
                config = {**service.sampler(job).describe(), "rule": job.presto.rule}
                body = response(job, service.model, seed, prompts, choices, config)
            except Exception as exc:  # Cancelled, an EngineError, or a bug (a 500, logged with its traceback)
                raise _failure(exc, request_timeout_s) from None
        except Failure as failure:
            return failure.answer()
        if job.stream:
            return StreamingResponse(stream_events(body), media_type="text/event-stream")
        return JSONResponse(body)

    async def completions(request: Request) -> Response:
        return await serve(request, "completions")

    async def chat(request: Request) -> Response:
        return await serve(request, "chat")

    async def models(request: Request) -> Response:
        card = {"id": service.model, "object": "model", "created": 0, "owned_by": "presto-sgl"}
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        healthy = await run_in_threadpool(service.backend_healthy)
        body = {"status": "ok" if healthy else "backend_unavailable", "model": service.model,
                "chains": service.pool.snapshot(), "backend_calls": service.engine.calls}
        return JSONResponse(body, 200 if healthy else 503)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(service.pool.close)

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
