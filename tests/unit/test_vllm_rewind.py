"""The vLLM plugin's rewind of a discarded chunked-prefill draw (presto_sgl/server_side/vllm/rewind.py),
on torch CPU generators and a runner shaped like vLLM's: an asking row's generator is where an
unchunked prefill would leave it, vLLM's own rewind (which raises on a CPU generator) skips only
those, and a runner with no asking discarded row is vLLM's own."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from presto_sgl.server_side.rowstats import Ask, Plan
from presto_sgl.server_side.vllm import rewind


class Runner:
    """The attributes of vLLM's V1 GPUModelRunner the rewind reads, and its rewind loop."""

    def __init__(self, discard: list[bool]) -> None:
        gens = {i: torch.Generator().manual_seed(10 + i) for i in range(len(discard))}
        self.input_batch = SimpleNamespace(generators=gens)
        self.discard_request_mask = SimpleNamespace(np=np.array(discard))

    def _bookkeeping_sync(self) -> None:  # vLLM 0.32's loop over discarded rows
        for i in np.nonzero(self.discard_request_mask.np)[0]:
            gen = self.input_batch.generators.get(int(i))
            if gen is not None:
                gen.set_offset(gen.get_offset() - 4)  # a CPU generator raises here


rewind.wrap_bookkeeping(Runner)


def _draw(gen: torch.Generator) -> list[float]:
    return torch.rand(4, generator=gen).tolist()


def test_an_asking_discarded_row_draws_as_if_unchunked():
    runner = Runner([True, True, False])
    plan = Plan.of([Ask(), None, Ask()])  # rows 0 and 2 ask; row 1 is another user's, also discarded
    kept = rewind.keep(runner, plan)
    assert set(kept) == {0}  # asking and discarded: row 2 keeps its draw, row 1 is not ours
    gens = dict(runner.input_batch.generators)
    for gen in gens.values():
        _draw(gen)  # the step's draw
    rewind.restore(runner, kept)
    assert _draw(gens[0]) == _draw(torch.Generator().manual_seed(10))  # the discarded draw never happened
    with pytest.raises(RuntimeError, match="offset"):  # row 1: vLLM's own rewind, as without the plugin
        runner._bookkeeping_sync()
    assert runner.input_batch.generators == gens  # row 0 hidden during the call only


def test_no_asking_discarded_row_is_vllms_own():
    runner = Runner([False, True])
    kept = rewind.keep(runner, Plan.of([Ask(), None]))
    assert kept == {}
    rewind.restore(runner, kept)
    with pytest.raises(RuntimeError, match="offset"):
        runner._bookkeeping_sync()
    runner = Runner([True])
    rewind.restore(runner, rewind.keep(runner, Plan.of([Ask()])))
    runner._bookkeeping_sync()  # the asking row alone: nothing for vLLM to rewind
