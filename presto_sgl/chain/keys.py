"""Keyed randomness: every draw of a decision comes from a hash of its identity.

A key is ``(run seed, prompt id, stage, decision, purpose)`` hashed with BLAKE2b.
Two keyings name a decision (docs/design.md §4):

* path keys -- the accept/reject bits taken since the stage started ("" at the
  stage's first decision, "10" after an accept then a reject);
* step keys -- the transition index k within the stage.

No global RNG is used anywhere: the same key always gives the same draw, and two
decisions of one chain never share a key.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Literal

DecisionId = int | str
"""A decision's identity within a stage: a path string (path keys) or a step index (step keys)."""

Keying = Literal["path", "step"]
"""The keys a rule couples with: by path in the outcome tree, or by step index (docs/design.md §4)."""

SEED_MASK = 0x7FFF_FFFF_FFFF_FFFF
"""Engine seeds are 63-bit non-negative integers."""


def hash64(*parts: object) -> int:
    """A 64-bit integer hash of ``parts`` (their ``repr``s, unambiguously joined)."""
    data = "\x1f".join(repr(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def uniform01(key: int) -> float:
    """A uniform draw in (0, 1] from a 64-bit key (53 bits of resolution).

    Zero is excluded so that ``u <= A`` never accepts when A = 0.
    """
    return ((hash64("u", key) >> 11) + 1) * 2.0**-53


def randbelow(key: int, n: int) -> int:
    """A uniform integer in {0, ..., n-1} (bias at most n / 2**64)."""
    if n < 1:
        raise ValueError(f"`n` (={n}) must be a positive integer")
    return (hash64("i", key) * n) >> 64


@dataclass(frozen=True)
class DecisionDraws:
    """The three random inputs of one MH decision."""

    cut_key: int
    seed: int  # the engine seed of the decision's suffix proposal
    uniform: float  # the acceptance uniform u in (0, 1]
    _exp1: list[float] = field(default_factory=list, init=False, compare=False, repr=False)

    def cut(self, length: int) -> int:
        """The uniform cut c in {0, ..., length-1}."""
        return randbelow(self.cut_key, length)

    def exp1(self, index: int) -> float:
        """An Exp(1) variable for position ``index`` (exponential-race cut laws)."""
        return -math.log(uniform01(hash64("e", self.cut_key, index)))

    def subkey(self, purpose: str, index: int = 0) -> int:
        """A 64-bit key for another draw of this decision (``purpose``, ``index``): MultiTryMH's
        per-try temperatures, seeds and selection uniform."""
        return hash64(purpose, self.cut_key, index)

    def exp1s(self, n: int) -> list[float]:
        """``exp1(0..n-1)``, hashed once per position and kept: a race reruns them at every
        node and round (do not modify the list)."""
        cache = self._exp1
        cache.extend(self.exp1(j) for j in range(len(cache), n))
        return cache


@dataclass(frozen=True)
class ChainKeys:
    """Key derivation for one chain: run seed and prompt id are fixed."""

    run_seed: int
    prompt_id: int | str = 0

    def decision(self, stage: int, decision: int | str) -> DecisionDraws:
        """Draws of one MH decision; ``decision`` is a path string or a step index."""
        base = hash64("presto", self.run_seed, self.prompt_id, stage, decision)
        return DecisionDraws(
            cut_key=hash64("cut", base),
            seed=hash64("seed", base) & SEED_MASK,
            uniform=uniform01(hash64("acc", base)),
        )

    @property
    def route(self) -> str:
        """The chain's routing key (not randomness): its requests share the prompt and state
        prefixes, so a router that honours it keeps them with their KV cache on one worker."""
        return f"{self.run_seed}/{self.prompt_id}"

    def extension_seed(self, stage: int) -> int:
        """Engine seed of the block extension that opens ``stage``."""
        return hash64("presto", self.run_seed, self.prompt_id, stage, "extend") & SEED_MASK
