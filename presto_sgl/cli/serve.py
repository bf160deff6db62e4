"""``presto-sgl serve``: an OpenAI-compatible endpoint doing power sampling on one backend.

The method flags set the defaults of what a request leaves out; the request's own
fields (``alpha``, ``max_tokens``, ``block_size``, ``steps``, ``method``, ``rule``,
``budget``, ``seed``, ...) override them per request (:mod:`presto_sgl.serve`).
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import registry
from ..build import ending_default
from ..errors import EngineError
from .common import PROG, UsageError, cli_message
from .engines import ENGINES
from .options import add_engine_options, add_method_options, add_scheduler_flag, args_method, model_name

DEFAULT_PORT = 8300


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve power sampling behind an OpenAI-compatible HTTP API",
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /health, /tokenize, "
        "/detokenize, /tokenizer_info, /metrics and /version; every answer is power-sampled from "
        "p0^alpha on the --engine backend (echo with logprobs: the prompt scored in one pass).",
    )
    add_engine_options(p)
    add_method_options(p)
    srv = p.add_argument_group("server")
    srv.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    srv.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default: {DEFAULT_PORT}; not vLLM's 8000 nor SGLang's 30000, so both run beside it)",
    )
    srv.add_argument(
        "--api-key",
        default=os.environ.get("PRESTO_SGL_API_KEY"),
        help="require `Authorization: Bearer KEY` on every route but /health, /metrics, /version and /openapi.json "
        "(default: $PRESTO_SGL_API_KEY; unset: no key)",
    )
    srv.add_argument(
        "--max-body-bytes", type=int, default=8 << 20, help="largest request body; larger ones get 413 (default: 8 MiB)"
    )
    srv.add_argument(
        "--served-model-name",
        default=None,
        help="the model id of /v1/models and the `model` requests must name (default: the hub id the "
        "backend serves, as given, or its folder's name)",
    )
    srv.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of requests that send none (default: a fresh one per request, returned in its `presto.seed`)",
    )
    srv.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="chains running at once (default: 8 on a server engine, 1 in process)",
    )
    add_scheduler_flag(srv)
    srv.add_argument(
        "--queue-size",
        type=int,
        default=64,
        help="chains that may wait for a free slot; beyond it requests get 429 (default: 64)",
    )
    srv.add_argument("--max-n", type=int, default=16, help="most chains (n) per request (default: 16)")
    srv.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        help="seconds a request may take, queue time included, before it is cancelled with 504 (default: 600)",
    )
    srv.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        help="on Ctrl-C / SIGTERM, seconds requests in flight may take to finish before they are "
        "cancelled with 503 (default: 10)",
    )
    srv.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn log level (default: info)",
    )
    p.set_defaults(func=run)


def _service(args: argparse.Namespace):
    """The service and its timeout, or a UsageError naming the flag."""
    from ..config import PowerConfig
    from ..scheduling.pool import ChainPool
    from ..scheduling.scheduler import Scheduler
    from ..serve.request import Defaults
    from ..serve.service import Service

    spec = args_method(args)
    if not spec.is_kernel:
        raise ValueError(
            f"`--method` {spec.method!r} is a baseline; serve runs the MH kernels ({', '.join(registry.KERNELS)})"
        )
    assert isinstance(spec.config, PowerConfig) and spec.presto is not None  # a kernel's
    for flag, value in (("--port", args.port), ("--request-timeout", args.request_timeout)):
        if not value > 0:
            raise ValueError(f"`{flag}` (={value!r}) must be > 0")
    if not args.shutdown_grace >= 0:
        raise ValueError(f"`--shutdown-grace` (={args.shutdown_grace!r}) must be >= 0 (0: cancel at once)")
    engine = ENGINES[args.engine](args)
    config = spec.config if args.ending is not None else ending_default(spec.config, engine)
    defaults = Defaults(config, spec.presto, seed=args.seed, max_n=args.max_n)
    concurrency = args.concurrency
    if concurrency is None:
        concurrency = 8 if args.engine in ("sglang", "vllm") else 1
    pool = ChainPool(
        concurrency,
        args.queue_size,
        Scheduler(engine, share_from=args.share_from) if args.scheduler == "shared" and concurrency > 1 else None,
    )
    name = args.served_model_name or served_name(model_name(engine, args))
    return Service(engine, defaults, pool, name)


def served_name(model: str) -> str:
    """The default model id: a hub id as given (harnesses load its tokenizer by that name), a
    local folder by its name."""
    return os.path.basename(model.rstrip("/")) if os.path.isdir(model) else model


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serve.app import AppOptions, create_app
    except ImportError as exc:
        raise UsageError(
            f"serve needs the `serve` extra ({exc.name} is missing): pip install 'presto-sgl[serve]'"
        ) from None
    try:
        service = _service(args)
    except (ValueError, TypeError) as exc:
        raise UsageError(cli_message(exc)) from exc
    except EngineError as exc:  # the backend is not up
        raise UsageError(str(exc)) from exc
    if not args.max_body_bytes > 0:
        raise UsageError(f"`--max-body-bytes` (={args.max_body_bytes!r}) must be > 0")
    if args.api_key is not None and not args.api_key:
        raise UsageError("`--api-key` must not be empty (leave it out for no key)")
    options = AppOptions(
        request_timeout_s=args.request_timeout, api_key=args.api_key, max_body_bytes=args.max_body_bytes
    )
    app = create_app(service, options)
    print(
        f"{PROG} serve: {service.model} on http://{args.host}:{args.port}/v1 (engine {args.engine}, "
        f"{service.pool.concurrency} chains at once, {args.queue_size} waiting)",
        file=sys.stderr,
        flush=True,
    )
    # On Ctrl-C / SIGTERM, requests still in flight after --shutdown-grace are cancelled (their chains with them).
    uvicorn.run(
        app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=args.shutdown_grace
    )
    return 0
