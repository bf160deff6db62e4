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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import BackendUnavailable, ConfigError, EngineError
from ..scheduling.pool import Cancelled, Ticket
from ..version import __version__
from . import tokens
from .openapi import openapi_schema
from .parse import ChainJob, parse
from .prometheus import Metrics
from .request import ParamError
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
        *,
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


OPEN_PATHS = frozenset({"/health", "/metrics", "/version", "/openapi.json"})
"""The routes answered without the API key."""


@dataclass(frozen=True)
class AppOptions:
    """How the app answers: requests time out after ``request_timeout_s`` (queue time
    included); the handler polls its chains every ``poll_s``; a stream sends an SSE comment
    every ``keepalive_s`` while its chains run; ``api_key`` (when set) must come as
    ``Authorization: Bearer KEY`` on every route but :data:`OPEN_PATHS`; bodies over
    ``max_body_bytes`` get 413."""

    request_timeout_s: float = 600.0
    poll_s: float = 0.1
    keepalive_s: float = 15.0
    api_key: str | None = None
    _: KW_ONLY
    max_body_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        if not self.request_timeout_s > 0:
            t = self.request_timeout_s
            raise ConfigError("request_timeout_s", t, f"{{request_timeout_s}} (={t!r}) must be > 0")
        if not self.keepalive_s > 0:
            raise ConfigError("keepalive_s", self.keepalive_s, f"{{keepalive_s}} (={self.keepalive_s!r}) must be > 0")
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key", self.api_key, "{api_key} must be a non-empty string or None (no key)")


def create_app(service: Service, options: AppOptions | None = None) -> Starlette:
    """The app serving ``service``, answering as ``options`` say (default :class:`AppOptions`)."""
    handlers = Handlers(service, options if options is not None else AppOptions())
    routes = [
        Route("/v1/completions", handlers.completions, methods=["POST"]),
        Route("/v1/chat/completions", handlers.chat, methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/health", handlers.health, methods=["GET"]),
        Route("/tokenize", handlers.tool(tokens.tokenize), methods=["POST"]),
        Route("/detokenize", handlers.tool(tokens.detokenize), methods=["POST"]),
        Route("/tokenizer_info", handlers.tool(tokens.tokenizer_info), methods=["GET"]),
        Route("/metrics", handlers.prometheus, methods=["GET"]),
        Route("/version", handlers.version, methods=["GET"]),
        Route("/openapi.json", handlers.openapi, methods=["GET"]),
    ]
    guard = Middleware(KeyGuard, api_key=handlers.options.api_key, metrics=handlers.metrics)
    return Starlette(routes=routes, lifespan=handlers.lifespan, middleware=[guard])


class Handlers:
    """The routes' handlers on one service: a chain request is started (:meth:`start`: parsed,
    tokenized, admitted whole), then answered whole (:meth:`finish`) or streamed
    (:meth:`events`); the rest are small reads of the service."""

    def __init__(self, service: Service, options: AppOptions) -> None:
        self.service = service
        self.options = options
        self.metrics = Metrics()

    async def completions(self, request: Request) -> Response:
        return await self.serve(request, "completions")

    async def chat(self, request: Request) -> Response:
        return await self.serve(request, "chat")

    async def serve(self, request: Request, kind: str) -> Response:
        try:
            job = await self.start(request, kind)
            if job.job.stream:
                return StreamingResponse(self.events(request, job), media_type="text/event-stream")
            try:
                body = await self.finish(request, job)
            except Exception as exc:  # Cancelled, an EngineError, or a bug (a 500, logged with its traceback)
                raise self.failure(exc) from None
        except Failure as failure:
            self.metrics.request(request.url.path, failure.status)
            return failure.answer()
        try:
            answer = JSONResponse(body)
        except ValueError as exc:  # a value JSON cannot carry (a bug: the validators keep them finite)
            bug = self.failure(exc)
            self.metrics.request(request.url.path, bug.status)
            return bug.answer()
        self.metrics.request(request.url.path, 200)
        return answer

    def failure(self, exc: BaseException) -> Failure:
        return _failure(exc, self.options.request_timeout_s)

    async def body_of(self, request: Request) -> Any:
        raw = await request.body()
        limit = self.options.max_body_bytes
        if len(raw) > limit:
            raise Failure(
                413,
                f"the request body has {len(raw)} bytes; this server takes at most {limit}",
                code="request_too_large",
            )
        try:
            return json.loads(raw)
        except ValueError:
            raise Failure(400, "the request body is not valid JSON") from None

    async def start(self, request: Request, kind: str) -> AdmittedJob:
        """The request parsed, its prompts tokenized and its chains admitted to the pool (a
        Failure: 400 naming the field, 404 for another model, 429 at capacity)."""
        service = self.service
        body = await self.body_of(request)
        model = body.get("model") if isinstance(body, dict) else None
        if model is not None and model != service.model:
            raise Failure(
                404,
                f"the model `{model}` does not exist; this server serves `{service.model}` (GET /v1/models)",
                "model",
                "model_not_found",
            )
        ticket = Ticket(time.monotonic() + self.options.request_timeout_s)
        try:
            job = parse(body, kind, service.defaults, vocab=service.engine.capabilities.vocab_size)
            seed, prompts, futures = await run_in_threadpool(service.start, job, ticket)
        except ParamError as exc:
            raise Failure(400, str(exc), exc.param) from None
        except Exception as exc:  # a bug: a 500 naming it, logged with its traceback
            raise self.failure(exc) from None
        if futures is None:
            snap = service.pool.snapshot()
            raise Failure(
                429,
                f"the server is at capacity ({snap['running']} chains running, {snap['queued']} "
                f"waiting, capacity {service.pool.capacity}); retry later",
                code="server_busy",
                headers={"Retry-After": "1"},
            )
        return AdmittedJob(job, ticket, seed, prompts, futures=futures)

    async def finish(self, request: Request, job: AdmittedJob) -> dict[str, Any]:
        """The response body of a started job (raises Cancelled, an EngineError, or a bug)."""
        service = self.service
        futures = [asyncio.wrap_future(f) for f in job.futures]
        results = await _await_chains(request, futures, job.ticket, self.options.poll_s)
        choices = [service.choice(job.job, i, r, job.prompts[i // job.job.n]) for i, r in enumerate(results)]
        for c in choices:
            if c.result is not None:
                self.metrics.chain(c.result.metrics)
        config = {} if job.job.scoring else {**service.sampler(job.job).describe(), "rule": job.job.presto.rule}
        return response(job.job, service.text, service.model, job.seed, job.prompts, choices, config)

    async def events(self, request: Request, job: AdmittedJob) -> AsyncIterator[str]:
        """A stream: an SSE comment now and every ``keepalive_s`` while the chains run (proxies
        keep the connection), then the answer's chunks, or an error event."""
        waiter = asyncio.ensure_future(self.finish(request, job))
        try:
            yield ": presto-sgl: power sampling\n\n"
            while not (await asyncio.wait({waiter}, timeout=self.options.keepalive_s))[0]:
                yield ": presto-sgl: chains running\n\n"
            try:
                chunks = list(stream_events(waiter.result(), job.job.include_usage))
            except Exception as exc:  # what stopped a chain, or a value JSON cannot carry (a bug)
                failure = self.failure(exc)
                self.metrics.request(request.url.path, failure.status)
                yield f"data: {json.dumps(error_body(failure.status, str(failure), failure.param, failure.code))}\n\n"
                yield "data: [DONE]\n\n"
                return
            self.metrics.request(request.url.path, 200)
            for chunk in chunks:
                yield chunk
        finally:
            if not waiter.done():  # the client went away mid-stream
                job.ticket.cancel("disconnect")
                waiter.cancel()

    async def models(self, request: Request) -> Response:
        service = self.service
        card = {
            "id": service.model,
            "object": "model",
            "created": 0,
            "owned_by": "presto-sgl",
            "max_model_len": service.engine.capabilities.context_length,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        service = self.service
        healthy = await run_in_threadpool(service.backend_healthy)
        body = {
            "status": "ok" if healthy else "backend_unavailable",
            "model": service.model,
            "chains": service.pool.snapshot(),
            "backend_calls": service.engine.calls,
        }
        return JSONResponse(body, 200 if healthy else 503)

    def tool(self, fn: Callable[..., Any]) -> Callable[[Request], Awaitable[Response]]:
        """A tokenizer endpoint (:mod:`.tokens`): the body in, the answer's body out, 400 naming a bad field."""

        async def handle(request: Request) -> Response:
            try:
                args = [await self.body_of(request)] if request.method == "POST" else []
                try:
                    return JSONResponse(await run_in_threadpool(fn, self.service, *args))
                except ParamError as exc:
                    raise Failure(400, str(exc), exc.param) from None
            except Failure as failure:
                return failure.answer()

        return handle

    async def prometheus(self, request: Request) -> Response:
        text = self.metrics.render(self.service.pool.snapshot())
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": __version__})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_schema(self.service))

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(self.service.pool.close)


class KeyGuard:
    """The API key, checked in constant time, before any route but :data:`OPEN_PATHS`."""

    def __init__(self, app: Any, api_key: str | None, metrics: Metrics) -> None:
        self.app, self.api_key, self.metrics = app, api_key, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.api_key is not None and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
                self.metrics.request(scope["path"], 401)
                message = "a valid API key is required: send `Authorization: Bearer KEY` (the server's --api-key)"
                answer = JSONResponse(error_body(401, message, None, "invalid_api_key"), 401)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class AdmittedJob:
    """A request admitted to the pool: its job, ticket, seed, prompt ids and chain futures."""

    job: ChainJob
    ticket: Ticket
    seed: int
    prompts: list[tuple[int, ...]]
    _: KW_ONLY
    futures: list[Any]
