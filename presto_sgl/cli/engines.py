"""Engines by name (``--engine``): builders from the parsed arguments."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..engines.base import Engine


def _reference_engine(args: argparse.Namespace) -> Engine:
    from ..engines.reference import ReferenceEngine, ReferenceLM

    return ReferenceEngine(ReferenceLM(args.vocab_size, seed=args.model_seed))


def _embedded_engine(args: argparse.Namespace) -> Engine:
    from .. import models

    try:
        return models.embedded_engine(args.model, device=args.device, dtype=args.dtype, tokenizer=args.tokenizer)
    except (FileNotFoundError, OSError) as exc:
        raise ValueError(f"`--model` {args.model!r}: {exc}") from None


def _sglang_engine(args: argparse.Namespace) -> Engine:
    from ..engines.sglang.http import SGLangEngine

    return SGLangEngine(
        args.url or "http://127.0.0.1:30000",
        mode=args.server_mode,
        timeout_s=args.timeout,
        restart_timeout_s=args.restart_timeout,
        tokenizer=args.tokenizer,
    )


def _vllm_engine(args: argparse.Namespace) -> Engine:
    from ..engines.vllm.http import VLLMEngine

    return VLLMEngine(
        args.url or "http://127.0.0.1:8000",
        mode=args.server_mode,
        timeout_s=args.timeout,
        restart_timeout_s=args.restart_timeout,
        tokenizer=args.tokenizer,
    )


ENGINES: dict[str, Callable[[argparse.Namespace], Engine]] = {
    "embedded": _embedded_engine,
    "reference": _reference_engine,
    "sglang": _sglang_engine,
    "vllm": _vllm_engine,
}
"""Engine name -> builder from the parsed arguments. Add new engines here."""
