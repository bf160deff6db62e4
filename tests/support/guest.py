"""Other users' traffic beside presto-sgl's on a shared server (the guest-plugin tests,
tests/integration/test_sglang_guest.py and test_vllm_guest.py).

Each ordinary row uses what a shared server's other clients send: nucleus and top-k / min-p
truncation, repetition / frequency / presence penalties, a logit bias, a grammar and ``n`` > 1.
They are greedy (or seeded, on vLLM), so their tokens are determined and can be compared across
runs: alone, and beside presto rows in one batch.
"""

from __future__ import annotations

from typing import Any

from presto_sgl import wire

ORDINARY_PROMPTS = (
    "Name three rivers in Europe.",
    "What is the boiling point of water?",
    "Write a greeting for a birthday card.",
    "Give a number between 10 and 99.",
)
REGEX = r"[A-Z][a-z]+ [0-9]{2}"
LOGIT_BIAS_TEXT = " blue"  # a token the biased row is pushed toward


def ordinary_params(bias_id: int) -> list[dict[str, Any]]:
    """One set of sampling options per ordinary row (each row also sets its length)."""
    return [
        {"top_p": 0.9, "top_k": 20, "min_p": 0.05},
        {"repetition_penalty": 1.3, "frequency_penalty": 0.4, "presence_penalty": 0.3},
        {"logit_bias": {str(bias_id): 6.0}},
        {"regex": REGEX},
    ]


def presto_keys(meta: dict[str, Any]) -> list[str]:
    """The keys of an answer's meta info that only presto-sgl's plugin writes."""
    return sorted(k for k in meta if k.startswith(wire.PRESTO_KEYS))


def assert_same_answers(alone: list[tuple[list[int], list[float]]], mixed: list[tuple[list[int], list[float]]]):
    """Each ordinary row's tokens equal and its log-probabilities within 1e-4 (the batch's
    composition changes the matmul blocking, not the values beyond float32 noise)."""
    assert len(alone) == len(mixed)
    for (ta, la), (tm, lm) in zip(alone, mixed, strict=True):
        assert ta == tm
        assert len(la) == len(lm) and max((abs(a - b) for a, b in zip(la, lm)), default=0.0) < 1e-4
