"""The ASGI app (Starlette): ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``, ``/health``,
``/tokenize``, ``/detokenize``, ``/tokenizer_info`` (vLLM's shapes), ``/metrics`` (Prometheus), ``/version``,
``/openapi.json`` (:mod:`.openapi`).

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
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from ..errors import BackendUnavailable, ConfigError, EngineError
from ..pool import Cancelled, Ticket
from . import tokens
from .metrics import Metrics
from .openapi import openapi_schema
from .params import ChainJob, ParamError, parse
from .responses import error_body, response, stream_events
from .service import Service

log = logging.getLogger("presto_sgl.serve")


class Failure(Exception):
    """An HTTP error answer: ``status`` and the OpenAI error body's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.headers = status, param, code, headers or {}

    def answer(self) -> JSONResponse:
        return JSONResponse(error_body(self.status, str(self), self.param, self.code), self.status, self.headers)


def _failure(exc: BaseException, timeout_s: float) -> Failure:
    """The HTTP answer for what stopped a chain."""
    if isinstance(exc, Cancelled):
        if exc.reason == "timeout":
            return Failure(
                504,
                f"the request did not finish within the server's --request-timeout of {timeout_s:g} s; "
                "ask for fewer tokens or steps, or raise --request-timeout",
                code="timeout",
            )
        if exc.reason == "shutdown":
            return Failure(503, "the server is shutting down", code="shutting_down")
        return Failure(499, f"the request was cancelled ({exc.reason})", code=exc.reason)
    if isinstance(exc, BackendUnavailable):
        return Failure(
            503, f"the backend is unavailable: {exc}", code="backend_unavailable", headers={"Retry-After": "5"}
        )
    if isinstance(exc, EngineError):
        return Failure(502, f"the backend failed: {exc}", code="backend_error")
    log.error("chain failed", exc_info=exc)
    return Failure(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")


async def _await_chains(
    request: Request, futures: Sequence[asyncio.Future], ticket: Ticket, poll_s: float
) -> list[Any]:
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


def create_app(
    service: Service,
    *,
    request_timeout_s: float = 600.0,
    poll_s: float = 0.1,
    keepalive_s: float = 15.0,
    api_key: str | None = None,
    max_body_bytes: int = 8 << 20,
) -> Starlette:
    """The app serving ``service``; requests time out after ``request_timeout_s`` (queue time
    included); a stream sends an SSE comment every ``keepalive_s`` while its chains run;
    ``api_key`` (when set) must come as ``Authorization: Bearer KEY`` on every route but
    ``/health``, ``/metrics``, ``/version`` and ``/openapi.json``; bodies over ``max_body_bytes`` get 413."""
    if not request_timeout_s > 0:
        raise ConfigError(
            "request_timeout_s", request_timeout_s, f"{{request_timeout_s}} (={request_timeout_s!r}) must be > 0"
        )
    if not keepalive_s > 0:
        raise ConfigError("keepalive_s", keepalive_s, f"{{keepalive_s}} (={keepalive_s!r}) must be > 0")
    if api_key is not None and not api_key:
        raise ConfigError("api_key", api_key, "{api_key} must be a non-empty string or None (no key)")
    metrics = Metrics()
    open_paths = {"/health", "/metrics", "/version", "/openapi.json"}

    async def body_of(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > max_body_bytes:
            raise Failure(
                413,
                f"the request body has {len(raw)} bytes; this server takes at most {max_body_bytes}",
                code="request_too_large",
            )
        try:
            return json.loads(raw)
        except ValueError:
            raise Failure(400, "the request body is not valid JSON") from None

    async def finish(request: Request, job: ParsedJob) -> dict[str, Any]:
        """The response body of a started job (raises Cancelled, an EngineError, or a bug)."""
        results = await _await_chains(request, [asyncio.wrap_future(f) for f in job.futures], job.ticket, poll_s)
        choices = [service.choice(job.job, i, r, job.prompts[i // job.job.n]) for i, r in enumerate(results)]
        for c in choices:
            if c.result is not None:
                metrics.chain(c.result.metrics)
        config = {} if job.job.scoring else {**service.sampler(job.job).describe(), "rule": job.job.presto.rule}
        return response(job.job, service.text, service.model, job.seed, job.prompts, choices, config)

    async def start(request: Request, kind: str) -> ParsedJob:
        body = await body_of(request)
        model = body.get("model") if isinstance(body, dict) else None
        if model is not None and model != service.model:
            raise Failure(
                404,
                f"the model `{model}` does not exist; this server serves `{service.model}` (GET /v1/models)",
                "model",
                "model_not_found",
            )
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
            raise Failure(
                429,
                f"the server is at capacity ({snap['running']} chains running, {snap['queued']} "
                f"waiting, capacity {service.pool.capacity}); retry later",
                code="server_busy",
                headers={"Retry-After": "1"},
            )
        return ParsedJob(job, ticket, seed, prompts, futures)

    async def events(request: Request, job: ParsedJob) -> AsyncIterator[str]:
        """A stream: an SSE comment now and every ``keepalive_s`` while the chains run (proxies
        keep the connection), then the answer's chunks, or an error event."""
        waiter = asyncio.ensure_future(finish(request, job))
        try:
            yield ": presto-sgl: power sampling\n\n"
            while not (await asyncio.wait({waiter}, timeout=keepalive_s))[0]:
                yield ": presto-sgl: chains running\n\n"
            try:
                body = waiter.result()
            except Exception as exc:
                failure = _failure(exc, request_timeout_s)
                metrics.request(request.url.path, failure.status)
                yield f"data: {json.dumps(error_body(failure.status, str(failure), failure.param, failure.code))}\n\n"
                yield "data: [DONE]\n\n"
                return
            try:
                events = list(stream_events(body, job.job.include_usage))
            except ValueError as exc:  # a value JSON cannot carry (a bug: the validators keep them finite)
                failure = _failure(exc, request_timeout_s)
                metrics.request(request.url.path, failure.status)
                yield f"data: {json.dumps(error_body(failure.status, str(failure), None, failure.code))}\n\n"
                yield "data: [DONE]\n\n"
                return
            metrics.request(request.url.path, 200)
            for event in events:
                yield event
        finally:
            if not waiter.done():  # the client went away mid-stream
                job.ticket.cancel("disconnect")
                waiter.cancel()

    async def serve(request: Request, kind: str) -> Response:
        try:
            job = await start(request, kind)
            if job.job.stream:
                return StreamingResponse(events(request, job), media_type="text/event-stream")
            try:
                body = await finish(request, job)
            except Exception as exc:  # Cancelled, an EngineError, or a bug (a 500, logged with its traceback)
                raise _failure(exc, request_timeout_s) from None
        except Failure as failure:
            metrics.request(request.url.path, failure.status)
            return failure.answer()
        try:
            answer = JSONResponse(body)
        except ValueError as exc:  # a value JSON cannot carry (a bug: the validators keep them finite)
            bug = _failure(exc, request_timeout_s)
            metrics.request(request.url.path, bug.status)
            return bug.answer()
        metrics.request(request.url.path, 200)
        return answer

    async def completions(request: Request) -> Response:
        return await serve(request, "completions")

    async def chat(request: Request) -> Response:
        return await serve(request, "chat")

    async def models(request: Request) -> Response:
        card = {
            "id": service.model,
            "object": "model",
            "created": 0,
            "owned_by": "presto-sgl",
            "max_model_len": service.engine.capabilities.context_length,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        healthy = await run_in_threadpool(service.backend_healthy)
        body = {
            "status": "ok" if healthy else "backend_unavailable",
            "model": service.model,
            "chains": service.pool.snapshot(),
            "backend_calls": service.engine.calls,
        }
        return JSONResponse(body, 200 if healthy else 503)

    def tool(fn: Any) -> Any:
        """A tokenizer endpoint (:mod:`.tokens`): the body in, the answer's body out, 400 naming a bad field."""

        async def handle(request: Request) -> Response:
            try:
                args = [await body_of(request)] if request.method == "POST" else []
                try:
                    return JSONResponse(await run_in_threadpool(fn, service, *args))
                except ParamError as exc:
                    raise Failure(400, str(exc), exc.param) from None
            except Failure as failure:
                return failure.answer()

        return handle

    async def prometheus(request: Request) -> Response:
        return PlainTextResponse(metrics.render(service.pool.snapshot()), media_type="text/plain; version=0.0.4")

    async def version(request: Request) -> Response:
        return JSONResponse({"version": __version__})

    class Guard:
        """The API key, checked in constant time, before any route but the open ones."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and api_key is not None and scope["path"] not in open_paths:
                given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
                if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                    metrics.request(scope["path"], 401)
                    answer = JSONResponse(
                        error_body(
                            401,
                            "a valid API key is required: send `Authorization: Bearer KEY` (the server's --api-key)",
                            None,
                            "invalid_api_key",
                        ),
                        401,
                    )
                    await answer(scope, receive, send)
                    return
            await self.app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(service.pool.close)

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/tokenize", tool(tokens.tokenize), methods=["POST"]),
        Route("/detokenize", tool(tokens.detokenize), methods=["POST"]),
        Route("/tokenizer_info", tool(tokens.tokenizer_info), methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/openapi.json", lambda request: JSONResponse(openapi_schema(service)), methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(Guard)])


@dataclass(frozen=True)
class ParsedJob:
    """A request admitted to the pool: its job, ticket, seed, prompt ids and chain futures."""

    job: ChainJob
    ticket: Ticket
    seed: int
    prompts: list[tuple[int, ...]]
    futures: list[Any]
