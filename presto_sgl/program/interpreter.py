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

Power sampling a whole program (:mod:`.scope`) adds three: a scope entered in a thread
(:func:`scoped`) is kept by every executor created there (:data:`INIT`: in its variables,
which forks copy, so forks and streamed programs keep it) and by the programs ``run_batch``
runs on its pool's threads (:data:`BATCH`, :data:`RUN`); :data:`EXECUTE` then gives every
``sgl.gen`` / ``sgl.select`` expression of such an executor to the scope's handler.

Why hooks rather than a backend: a backend sees only the resolved ``SglSamplingParams``
(a fixed list of fields, none of power_gen's) and would replace the user's
``RuntimeEndpoint``; the hooks rely on two dotted paths and leave every other expression,
the backend and its sampling to SGLang. If the registry cannot apply them, :func:`install`
raises instead of letting a power_gen run as a plain ``sgl.gen``.
"""

from __future__ import annotations

import contextlib
import contextvars
import pkgutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

EXECUTE = "sglang.lang.interpreter.StreamExecutor._execute"
FORK = "sglang.lang.interpreter.StreamExecutor.fork"
INIT = "sglang.lang.interpreter.StreamExecutor.__init__"
RUN = "sglang.lang.interpreter.run_program"
BATCH = "sglang.lang.interpreter.run_program_batch"
LINEAGE_VAR = "_presto_lineage"
"""The program variable holding a state's :class:`Lineage` (forks get their own)."""
SCOPE_VAR = "_presto_scope"
"""The program variable holding the scope a state runs in (copied into forks)."""

_scope: contextvars.ContextVar[Any] = contextvars.ContextVar("presto_sgl_scope", default=None)
_batch_scopes: dict[int, Any] = {}  # id(program) -> the scope of its run_batch in flight


@contextlib.contextmanager
def scoped(scope: Any) -> Iterator[None]:
    """Programs started in this thread within the block run in ``scope`` (None: in none)."""
    token = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(token)


def scope_of(executor: Any) -> Any:
    """The scope ``executor``'s program runs in, or None."""
    return executor.variables.get(SCOPE_VAR)


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


def install(run: Callable[[Any, Any], None], in_scope: Callable[[Any, Any, Any, Callable[[], Any]], None]) -> None:
    """Register and apply the hooks (once per process): ``run(executor, expr)`` executes a
    power_gen expression, ``in_scope(executor, expr, scope, own)`` an ``sgl.gen`` or
    ``sgl.select`` expression of a program that runs in a scope (``own()``: SGLang's own)."""
    global _installed
    with _lock:
        if _installed:
            return
        from sglang.lang.ir import SglGen, SglSelect
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        def around_execute(original: Callable, executor: Any, expr: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(expr, "presto_power_gen", False):
                return run(executor, expr)
            scope = scope_of(executor)
            if scope is not None and isinstance(expr, (SglGen, SglSelect)):
                return in_scope(executor, expr, scope, lambda: original(executor, expr, *args, **kwargs))
            return original(executor, expr, *args, **kwargs)

        def around_init(original: Callable, executor: Any, *args: Any, **kwargs: Any) -> None:
            original(executor, *args, **kwargs)
            if _scope.get() is not None:
                executor.variables[SCOPE_VAR] = _scope.get()

        def around_batch(original: Callable, program: Any, *args: Any, **kwargs: Any) -> Any:
            scope = _scope.get()
            if scope is None:
                return original(program, *args, **kwargs)
            with _lock:
                if _batch_scopes.get(id(program), scope) is not scope:
                    raise RuntimeError("one program cannot run_batch in two power-sampling scopes at once")
                _batch_scopes[id(program)] = scope
            try:
                return original(program, *args, **kwargs)
            finally:
                with _lock:
                    _batch_scopes.pop(id(program), None)

        def around_run(original: Callable, program: Any, *args: Any, **kwargs: Any) -> Any:
            scope = _batch_scopes.get(id(program)) if _scope.get() is None else None
            if scope is None:
                return original(program, *args, **kwargs)
            with scoped(scope):  # a run_batch pool thread of a program started in a scope
                return original(program, *args, **kwargs)

        def around_fork(original: Callable, executor: Any, size: int = 1, *args: Any, **kwargs: Any) -> Any:
            children = original(executor, size, *args, **kwargs)
            parent = lineage(executor)
            executor.variables[LINEAGE_VAR] = replace(parent, forks=parent.forks + 1)
            for i, child in enumerate(children):
                child.variables[LINEAGE_VAR] = Lineage(parent.path + ((parent.calls, parent.forks, i),))
            return children

        hooks = {EXECUTE: around_execute, FORK: around_fork, INIT: around_init, RUN: around_run, BATCH: around_batch}
        before = {target: pkgutil.resolve_name(target) for target in hooks}
        for target, hook in hooks.items():
            HookRegistry.register(target, hook, HookType.AROUND)
        HookRegistry.apply_hooks()
        missed = [target for target in hooks if pkgutil.resolve_name(target) is before[target]]
        if missed:
            raise RuntimeError(
                f"SGLang's hook registry did not apply presto-sgl's hooks on {missed}; "
                "power_gen cannot run as a program expression with this sglang version"
            )
        _installed = True
