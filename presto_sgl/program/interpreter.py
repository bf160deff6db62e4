"""The hooks that make ``power_gen`` an expression of SGLang's program interpreter.

SGLang's interpreter (``sglang.lang.interpreter.StreamExecutor``) runs each expression a
program adds (``s += ...``) through a closed ``isinstance`` chain in ``_execute``. Two
AROUND hooks, registered through SGLang's own hook registry
(``sglang.srt.plugins.hook_registry.HookRegistry``: what SGLang's plugins use to wrap a
function by its dotted path, and what presto-sgl's server plugin already uses), extend it:

- :data:`EXECUTE` runs an expression that carries ``presto_power_gen`` (a ``SglGen``
  subclass, so the interpreter's variable events, ``s[name]``, ``var_scope`` and forks treat
  it as a generation) with the function given to :func:`install`, on the executor's own
  thread; every other expression goes to SGLang's code unchanged.
- :data:`FORK` gives each fork a :class:`Lineage` (its parent's, plus which fork call
  and which fork it is), from which ``power_gen`` derives distinct, reproducible chain ids.

Why hooks rather than a backend: a backend sees only the resolved ``SglSamplingParams``
(a fixed list of fields, none of power_gen's) and would replace the user's
``RuntimeEndpoint``; the hooks rely on two dotted paths and leave every other expression,
the backend and its sampling to SGLang. If the registry cannot apply them, :func:`install`
raises instead of letting a power_gen run as a plain ``sgl.gen``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

EXECUTE = "sglang.lang.interpreter.StreamExecutor._execute"
FORK = "sglang.lang.interpreter.StreamExecutor.fork"
LINEAGE_VAR = "_presto_lineage"
"""The program variable holding a state's :class:`Lineage` (forks get their own)."""


@dataclass(frozen=True)
class Lineage:
    """Where a program state sits in its program: ``path`` has one ``(calls, forks, i)`` per
    fork above it (the parent's power_gen calls and fork calls before it, and which fork);
    ``calls`` / ``forks`` count this state's power_gen and fork calls so far."""

    path: tuple[tuple[int, int, int], ...] = ()
    calls: int = 0
    forks: int = 0


def lineage(executor: Any) -> Lineage:
    found = executor.variables.get(LINEAGE_VAR)
    return found if isinstance(found, Lineage) else Lineage()


def next_call(executor: Any) -> Lineage:
    """This state's lineage before its next power_gen call, which it counts."""
    now = lineage(executor)
    executor.variables[LINEAGE_VAR] = replace(now, calls=now.calls + 1)
    return now


_lock = threading.Lock()
_installed = False


def install(run: Callable[[Any, Any], None]) -> None:
    """Register and apply the two hooks (once per process); ``run(executor, expr)`` executes
    a power_gen expression."""
    global _installed
    with _lock:
        if _installed:
            return
        from sglang.lang.interpreter import StreamExecutor
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        def around_execute(original: Callable, executor: Any, expr: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(expr, "presto_power_gen", False):
                return run(executor, expr)
            return original(executor, expr, *args, **kwargs)

        def around_fork(original: Callable, executor: Any, size: int = 1, *args: Any, **kwargs: Any) -> Any:
            children = original(executor, size, *args, **kwargs)
            parent = lineage(executor)
            executor.variables[LINEAGE_VAR] = replace(parent, forks=parent.forks + 1)
            for i, child in enumerate(children):
                child.variables[LINEAGE_VAR] = Lineage(parent.path + ((parent.calls, parent.forks, i),))
            return children

        before = StreamExecutor._execute, StreamExecutor.fork
        HookRegistry.register(EXECUTE, around_execute, HookType.AROUND)
        HookRegistry.register(FORK, around_fork, HookType.AROUND)
        HookRegistry.apply_hooks()
        if (StreamExecutor._execute, StreamExecutor.fork) == before:
            raise RuntimeError(
                f"SGLang's hook registry did not apply presto-sgl's hooks on {EXECUTE} and {FORK}; "
                "power_gen cannot run as a program expression with this sglang version"
            )
        _installed = True
