"""Registering SGLang hooks, every target checked first (:mod:`..targets`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..targets import require

Hook = tuple[str, Callable[..., Any], Any]  # (dotted target, function, sglang HookType)


def register_all(hooks: Sequence[Hook]) -> None:
    """Check every target, then register each hook with SGLang's ``HookRegistry``."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    require("sglang", [target for target, _, _ in hooks])
    for target, fn, kind in hooks:
        HookRegistry.register(target, fn, kind)
