"""Hook targets are checked when a server loads the plugin: one that is missing (another SGLang
or vLLM version moved or renamed it) stops the server at start with its name, instead of a
server that runs without the hook (SGLang's own loader only logs a failed hook, and a plugin
without its hooks would answer without presto's fields, or with wrong ones)."""

from __future__ import annotations

import importlib.metadata
import pkgutil
from collections.abc import Sequence


class MissingHookTarget(SystemExit):
    """Raised at plugin load: a SystemExit, so the server's ``except Exception`` around plugin
    loading cannot swallow it and the process exits with the message."""


def require(dist: str, targets: Sequence[str]) -> None:
    """MissingHookTarget naming every one of ``targets`` (dotted paths) that does not resolve in
    the installed ``dist`` (``sglang`` or ``vllm``)."""
    missing = []
    for target in targets:
        try:
            pkgutil.resolve_name(target)
        except (ImportError, AttributeError, ValueError) as exc:
            missing.append(f"{target} ({type(exc).__name__}: {exc})")
    if missing:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        raise MissingHookTarget(
            f"presto-sgl's {dist} plugin cannot hook {dist} {version}: missing "
            + "; ".join(missing)
            + f". Install a presto-sgl that supports this {dist}, or the {dist} version presto-sgl pins "
            "(scripts/constraints.txt), or start the server without the plugin "
            f"({dist.upper()}_PLUGINS=none: presto-sgl then runs two-pass, PowerMH only)"
        )
