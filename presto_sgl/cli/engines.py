"""Engines by name (``--engine``): builders from the parsed arguments, and the counting
wrapper the progress line reads."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from ..engines.base import Completion, Engine, EngineCapabilities, Request
from ..engines.text import TextView


def _reference_engine(args: argparse.Namespace) -> Engine:
    from ..engines.reference import ReferenceEngine, ReferenceLM

    return ReferenceEngine(ReferenceLM(args.vocab_size, seed=args.model_seed))


def _embedded_engine(args: argparse.Namespace) -> Engine:
    from .. import models

    try:
        return models.embedded_engine(args.model, device=args.device)
    except (FileNotFoundError, OSError) as exc:
        raise ValueError(f"`--model` {args.model!r}: {exc}") from None


def _sglang_engine(args: argparse.Namespace) -> Engine:
    from ..engines.sglang.http import SGLangEngine

    return SGLangEngine(args.url or "http://127.0.0.1:30000", mode=args.server_mode, timeout_s=args.timeout,
                        restart_timeout_s=args.restart_timeout)


def _vllm_engine(args: argparse.Namespace) -> Engine:
    from ..engines.vllm.http import VLLMEngine

    return VLLMEngine(args.url or "http://127.0.0.1:8000", mode=args.server_mode, timeout_s=args.timeout,
                      restart_timeout_s=args.restart_timeout)


ENGINES: dict[str, Callable[[argparse.Namespace], Engine]] = {
    "embedded": _embedded_engine,
    "reference": _reference_engine,
    "sglang": _sglang_engine,
    "vllm": _vllm_engine,
}
"""Engine name -> builder from the parsed arguments. Add new engines here."""


class CountingEngine:
    """Forwards to an engine and counts its calls (the progress line needs them)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.calls = 0

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities

    @property
    def text(self) -> TextView:
        return self.inner.text

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.calls += 1
        return self.inner.generate(requests)
