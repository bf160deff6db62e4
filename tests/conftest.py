"""Shared fixtures: reference engines (seeded, or unseeded with a fixed generator) and the
committed tiny model on the embedded engine (loaded once, on first use)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

# No model hub here: hub ids resolve from the Hugging Face cache only (an id not in it fails at
# once instead of retrying the network for half a minute).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM  # no torch: threads are set below

# Under pytest-xdist, each of N workers gets cores / N intra-op threads (torch, and the CLI and
# server processes the tests start), set before anything imports torch: N workers at torch's
# default of every core each made the model-heavy tests 2-4x slower than alone on a 2-core
# machine, from OpenMP threads contending (tier 2: 636 s -> 416 s).
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))


def pytest_configure(config: pytest.Config) -> None:
    """``PRESTO_SGL_MUTANT=NAME``: run the session against a deliberately wrong sampler
    (tests/support/mutants.py; ``python -m benchmarks.mutations`` shows which tests catch each)."""
    name = os.environ.get("PRESTO_SGL_MUTANT")
    if name:
        from tests.support.mutants import apply

        print(f"mutant {name}: {apply(name)}")


SERVER_MARKERS = ("sglang", "vllm")
"""Markers of tests against a real server: each implies ``server`` (tier 3 of scripts/test.sh)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SERVER_MARKERS):
            item.add_marker(pytest.mark.server)


UNSEEDED_RNG = 12345
"""The generator seed of unseeded reference engines: their tests stay deterministic."""


@pytest.fixture
def reference_engine() -> Callable[..., ReferenceEngine]:
    """``make(lm, *, seeded=True)``: a fresh :class:`ReferenceEngine` over ``lm``. Unseeded
    engines ignore request seeds (every request a fresh draw, like SGLang on CPU) and draw
    from a generator seeded with :data:`UNSEEDED_RNG`."""

    def make(lm: ReferenceLM, *, seeded: bool = True) -> ReferenceEngine:
        return ReferenceEngine(lm, seeded=seeded, rng_seed=None if seeded else UNSEEDED_RNG)

    return make


@pytest.fixture(scope="session")
def tiny_adder():
    """(model, tokenizer) of the committed tiny-adder model on CPU (skipped without torch)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from presto_sgl.models import load

    return load("tiny-adder", device="cpu")


@pytest.fixture(scope="session")
def _tiny_embedded(tiny_adder):
    from presto_sgl.engines.embedded import EmbeddedEngine

    model, tok = tiny_adder
    return EmbeddedEngine(model, tok, name="tiny-adder")


@pytest.fixture
def tiny_engine(_tiny_embedded):
    """The seeded :class:`EmbeddedEngine` on the tiny model, one per session (its radix KV
    cache too: results must not depend on what is cached). Torch runs on one thread during
    the test: the model is tiny, and on a shared 2-core machine intra-op threads contending
    with other processes made the calls 5-20x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _tiny_embedded
    finally:
        torch.set_num_threads(threads)
