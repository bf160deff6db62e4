"""The in-process SGLang engine: ``sglang.Engine`` behind the token-level seam.

Everything :class:`~presto_sgl.engines.sglang.http.SGLangEngine` does is inherited:
native ``/generate`` bodies with ``input_ids`` (never text), log q_tau from
``output_token_logprobs``, log p0 from the same pass (the ``presto_raw_logprob`` plugin)
or a prefill-only scoring pass, one-pass detection (``mode="auto"``), validation and
bounded re-issue of aborted responses. Only the transport differs:
``_call(method, path, body)`` hands the body to ``sglang.Engine`` in this process
instead of an HTTP server, and answers like one (other routes: HTTP 404; SGLang's
ValueError for a bad request: 400; its RuntimeError: 500; all :class:`EngineHTTPError`).

=====================  ====================================================
``POST /generate``     ``Engine.generate(**body)`` (a list for a batch body)
``GET /model_info``    ``Engine.get_model_info()``
``GET /server_info``   ``Engine.get_server_info()``
``GET /v1/loads``      the tokenizer manager's load snapshots (SGLang 0.5.23)
=====================  ====================================================

The tokenizer manager runs in this process; the scheduler and detokenizer run in
SGLang's subprocesses, started on the first call (import ~6 s, start ~20 s on 2 CPU
cores). Without CUDA the engine uses the launcher's CPU settings
(``scripts/sglang_server.sh``): ``SGLANG_USE_CPU_ENGINE=1``, ``device="cpu"``,
``torch_native`` attention, no CUDA graphs, no overlap schedule, a 16384-token KV pool.
``SGLANG_PLUGINS`` defaults to ``presto_raw_logprob`` (SGLANG_PLUGINS=none: stock, two
passes); both variables are set in this process's environment before sglang loads, so
the scheduler subprocess inherits them. sglang must be importable: run from
``.venv-sglang`` (``bash scripts/install_sglang.sh``). End the engine with
:meth:`shutdown` or a ``with`` block; SGLang's shutdown ends every child process of
this process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ...errors import EngineError
from ...wire import SGLANG_PLUGIN
from .http import SGLangEngine
from .transport import EngineHTTPError

CPU_ENGINE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "cuda_graph_backend_decode": "disabled",
    "cuda_graph_backend_prefill": "disabled",
    "max_total_tokens": 16384,  # without it the CPU engine reserves a ~15 GB KV pool
    "disable_overlap_schedule": True,
    "sleep_on_idle": True,
}
"""``sglang.Engine`` arguments on a machine without CUDA (as ``scripts/sglang_server.sh``)."""


def _loads(engine: Any) -> dict[str, Any]:
    snapshots = engine.loop.run_until_complete(engine.tokenizer_manager.get_loads())
    return {"loads": [s.to_dict() for s in snapshots]}


def _generate(engine: Any, body: dict[str, Any]) -> Any:
    """``POST /generate`` on ``sglang.Engine.generate``, whose ``prompt`` is the route's ``text``."""
    body = dict(body)
    if "text" in body:
        body["prompt"] = body.pop("text")
    return engine.generate(**body)


_ROUTES = {
    ("POST", "/generate"): _generate,
    ("GET", "/model_info"): lambda engine, body: engine.get_model_info(),
    ("GET", "/server_info"): lambda engine, body: engine.get_server_info(),
    ("GET", "/v1/loads"): lambda engine, body: _loads(engine),
}


class SGLangInProcessEngine(SGLangEngine):
    """The engine protocol on an ``sglang.Engine`` started in this process.

    ``engine_args`` go to ``sglang.Engine`` unchanged (they override the CPU defaults).
    ``seeded=True`` also passes ``enable_deterministic_inference=True``, which per-request
    seeds need (GPU attention backends only).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        dtype: str = "bfloat16",
        device: str | None = None,
        mode: str = "auto",
        max_retries: int = 2,
        seeded: bool = False,
        vocab_size: int | None = None,
        context_length: int | None = None,
        **engine_args: Any,
    ) -> None:
        path = Path(model_path).expanduser()
        if not (path / "config.json").is_file():
            raise ValueError(
                f"`model_path` (={str(model_path)!r}) is not a model folder (no config.json); pass the folder of a "
                "transformers checkpoint, e.g. presto_sgl.models.materialize_smollm2()"
            )
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        args: dict[str, Any] = dict(CPU_ENGINE_ARGS) if device == "cpu" else {"device": device}
        if seeded:
            args["enable_deterministic_inference"] = True
        args.update(engine_args, model_path=str(path), dtype=dtype)
        self._engine_args = args
        self._engine: Any = None
        try:
            # Validates the arguments first; its first `_call` starts the engine.
            super().__init__(
                f"sglang.Engine({path})",
                mode=mode,
                max_retries=max_retries,
                seeded=seeded,
                vocab_size=vocab_size,
                context_length=context_length,
            )
        except BaseException:
            self.shutdown()
            raise

    # -- transport ---------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        """Like an SGLang server (``headers``, a router's, do not apply): unknown routes answer
        404 (so the base sees no router), bad requests 400 (SGLang's ValueError), failed ones 500."""
        route = _ROUTES.get((method, path))
        if route is None:
            raise EngineHTTPError(
                f"the in-process SGLang engine has no {method} {path} (it serves {sorted(_ROUTES)})", 404
            )
        engine = self._engine if self._engine is not None else self._start()
        with self._stats_lock:
            self.stats.http_requests += 1  # requests to the engine (no HTTP here)
        try:
            return route(engine, body)
        except (ValueError, RuntimeError) as exc:
            status = 400 if isinstance(exc, ValueError) else 500
            raise EngineHTTPError(f"in-process SGLang engine {method} {path} failed: {exc}", status) from exc

    def _start(self) -> Any:
        if self._engine_args["device"] == "cpu":
            os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
        os.environ.setdefault("SGLANG_PLUGINS", SGLANG_PLUGIN)
        try:
            from sglang.srt.entrypoints.engine import Engine
            from sglang.srt.utils.common import is_cpu
        except ImportError as exc:
            raise ImportError(
                f"SGLangInProcessEngine needs sglang, which {sys.executable} cannot import ({exc}); run from "
                ".venv-sglang (install it with `bash scripts/install_sglang.sh`, then use .venv-sglang/bin/python)"
            ) from exc
        if self._engine_args["device"] == "cpu" and not is_cpu():
            raise EngineError(
                "sglang decided it is not on a CPU engine (SGLANG_USE_CPU_ENGINE was unset when it first checked); "
                "export SGLANG_USE_CPU_ENGINE=1 before importing sglang.srt, or create this engine first"
            )
        self._engine = Engine(**self._engine_args)
        return self._engine

    # -- lifetime ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop SGLang's scheduler and detokenizer subprocesses (idempotent)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()
