"""Exact laws of PowerMH on an enumerable reference LM (test helper).

States are all V^T responses. The suffix-resampling kernel (cut c ~ Unif{0..T-1})
is built from the library's own ``kernel.log_acceptance``:

    P[x, y] = (1/T) sum_c [y_{0:c} = x_{0:c}] q_tau(y_{c+1:T} | x_{0:c}) A_c(x, y),
    P[x, x] += 1 - sum_y P[x, y].

The chain law after the block schedule is the extension law q_tau(block | x) pushed
through P_T^K stage by stage.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from presto_sgl import kernel
from presto_sgl.engines.reference import ReferenceLM


def sequences(vocab: int, length: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(vocab), repeat=length))


def target(lm: ReferenceLM, prompt: tuple[int, ...], length: int, alpha: float) -> np.ndarray:
    """pi_alpha over all responses of ``length`` tokens (normalized)."""
    logw = np.array([alpha * lm.score(prompt, x)[0] for x in sequences(lm.vocab_size, length)])
    w = np.exp(logw - logw.max())
    return w / w.sum()


def mh_kernel(lm: ReferenceLM, prompt: tuple[int, ...], length: int, alpha: float, tau: float) -> np.ndarray:
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}
    per_token = {}  # (prefix, suffix) -> (logp, logq)

    def score(prefix: tuple[int, ...], suffix: tuple[int, ...]) -> tuple[float, float]:
        key = (prefix, suffix)
        if key not in per_token:
            per_token[key] = lm.score(prompt + prefix, suffix, tau)
        return per_token[key]

    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        i = index[x]
        for c in range(length):
            lp_x, lq_x = score(x[:c], x[c:])
            for suf in itertools.product(range(lm.vocab_size), repeat=length - c):
                lp_y, lq_y = score(x[:c], suf)
                log_a = kernel.log_acceptance(lq_x, lq_y, lp_x, lp_y, alpha)
                P[i, index[x[:c] + suf]] += math.exp(lq_y) * math.exp(log_a) / length
        P[i, i] += 1.0 - P[i].sum()
    return P


def chain_law(
    lm: ReferenceLM, prompt: tuple[int, ...], max_new_tokens: int, block_size: int, steps: int, alpha: float, tau: float
) -> np.ndarray:
    """Exact law of the final state of PowerMH (over sequences(V, max_new_tokens))."""
    V = lm.vocab_size
    law = np.array([1.0])  # over the empty response
    prev: list[tuple[int, ...]] = [()]
    for T in range(block_size, max_new_tokens + 1, block_size):
        seqs = sequences(V, T)
        ext = np.zeros(len(seqs))
        for j, y in enumerate(seqs):
            base = prev.index(y[: T - block_size]) if T > block_size else 0
            ext[j] = law[base] * math.exp(lm.score(prompt + y[: T - block_size], y[T - block_size :], tau)[1])
        law = ext @ np.linalg.matrix_power(mh_kernel(lm, prompt, T, alpha, tau), steps)
        prev = seqs
    return law
