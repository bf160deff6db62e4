"""Many prompts in flight at once: one chain per prompt, run concurrently on threads.

Each chain is independent (its own keys: run seed and prompt id), so running them
concurrently changes nothing about any chain; against an SGLang server or router the
concurrent calls keep it busy (its scheduler batches requests across chains). In-process
engines (embedded, reference) serialize their calls (a lock), so chains on threads are
safe there too, if not faster. One sampler serves every chain: each run gets its own
planner state (docs/design.md §5).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ..chain.trace import TraceWriter
from ..execution.context import RunContext
from ..fields import integer
from ..methods import SampleResult
from .pool import ChainPool, Ticket
from .scheduler import Scheduler


def run_prompts(
    run_one: Callable[..., SampleResult],
    prompts: Sequence[Sequence[int]],
    *,
    seed: int,
    workers: int = 4,
    trace_dir: str | Path | None = None,
    on_done: Callable[[int, SampleResult], None] | None = None,
    scheduler: Scheduler | None = None,
) -> list[SampleResult]:
    """``run_one(prompt, seed=..., prompt_id=i, context=...)`` for every prompt, ``workers`` at a time.

    ``run_one`` is usually a method's ``run``. Results come back in prompt order; with
    ``trace_dir`` each prompt gets its own JSONL trace ``prompt-<i>.jsonl``. The first
    failure is raised after the other in-flight chains finish (chains not yet started then
    never start). The chains run in a :class:`~presto_sgl.scheduling.pool.ChainPool`; with a
    ``scheduler`` (:meth:`Scheduler.for_method`) each chain's context has its ``lane`` and
    their model calls are merged, one engine call per round (:mod:`presto_sgl.scheduling.scheduler`).
    """
    integer(1, "chains at a time")("workers", workers)
    folder = Path(trace_dir) if trace_dir is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def one(i: int, context: RunContext) -> SampleResult:
        if folder is None:
            result = run_one(prompts[i], seed=seed, prompt_id=i, context=context)
        else:
            with open(folder / f"prompt-{i}.jsonl", "w", encoding="utf-8") as f:
                traced = dataclasses.replace(context, trace=TraceWriter(f))
                result = run_one(prompts[i], seed=seed, prompt_id=i, context=traced)
        if on_done is not None:
            with lock:
                on_done(i, result)
        return result

    pool = ChainPool(workers, len(prompts), scheduler)
    try:
        futures = pool.submit(Ticket(math.inf), [functools.partial(one, i) for i in range(len(prompts))])
        assert futures is not None, "the queue holds every prompt"
        return [f.result() for f in futures]
    finally:
        pool.close()
