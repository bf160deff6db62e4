"""Exact laws of suffix-resampling MH kernels on an enumerable reference LM (test helper).

States are all V^T responses. PowerMH's kernel (cut c ~ Unif{0..T-1}, suffix from
q_tau) is built from the kernel object's own ``decide`` (so from the library's
``log_acceptance``), one scored proposal at a time:

    P[x, y] = (1/T) sum_c [y_{0:c} = x_{0:c}] q_tau(y_{c+1:T} | x_{0:c}) A_c(x, y),
    P[x, x] += 1 - sum_y P[x, y].

The chain law after the block schedule is the extension law q_tau(block | x) pushed
through P_T^K stage by stage (:func:`chain_law`, for any kernel's matrix).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.kernels import PowerMHKernel, Proposal
from presto_sgl.keys import DecisionDraws
from presto_sgl.state import ChainState

_DRAWS = DecisionDraws(cut_key=0, seed=0, uniform=1.0)  # decide's log A does not depend on them


def sequences(vocab: int, length: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(vocab), repeat=length))


def target(lm: ReferenceLM, prompt: tuple[int, ...], length: int, alpha: float) -> np.ndarray:
    """pi_alpha over all responses of ``length`` tokens (normalized)."""
    logw = np.array([alpha * lm.score(prompt, x)[0] for x in sequences(lm.vocab_size, length)])
    w = np.exp(logw - logw.max())
    return w / w.sum()


def per_token(lm: ReferenceLM, context: tuple[int, ...], tokens: tuple[int, ...], tau: float):
    """(log q_tau, log p0) of each of ``tokens`` after ``context``."""
    ctx, lq, lp = list(context), [], []
    for t in tokens:
        logp, logq, _ = lm.distribution(ctx, tau)
        lq.append(float(logq[t]))
        lp.append(float(logp[t]))
        ctx.append(t)
    return tuple(lq), tuple(lp)


def powermh_matrix(lm: ReferenceLM, prompt: tuple[int, ...], length: int, kernel: PowerMHKernel) -> np.ndarray:
    """PowerMH's transition matrix over responses of ``length`` tokens, log A from ``kernel.decide``."""
    tau = kernel.temperature
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}
    scored: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[float, ...], tuple[float, ...]]] = {}

    def score(prefix: tuple[int, ...], suffix: tuple[int, ...]):
        key = (prefix, suffix)
        if key not in scored:
            scored[key] = per_token(lm, prompt + prefix, suffix, tau)
        return scored[key]

    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        i = index[x]
        lq_x, lp_x = score((), x)
        state = ChainState(prompt, x, lq_x, lp_x)
        for c in range(length):
            for suf in itertools.product(range(lm.vocab_size), repeat=length - c):
                lq_y, lp_y = score(x[:c], suf)
                _, tr = kernel.decide(state, [Proposal(c, suf, lq_y, lp_y)], _DRAWS)
                P[i, index[x[:c] + suf]] += math.exp(math.fsum(lq_y)) * math.exp(tr.log_accept) / length
        P[i, i] += 1.0 - P[i].sum()
    return P


def mh_kernel(lm: ReferenceLM, prompt: tuple[int, ...], length: int, alpha: float, tau: float) -> np.ndarray:
    """PowerMH's transition matrix at (alpha, tau)."""
    return powermh_matrix(lm, prompt, length, PowerMHKernel(alpha, tau))


def chain_law(
    lm: ReferenceLM,
    prompt: tuple[int, ...],
    max_new_tokens: int,
    block_size: int,
    steps: int,
    tau: float,
    matrix: Callable[[int], np.ndarray],
) -> np.ndarray:
    """Exact law of the final state (over sequences(V, max_new_tokens)): block extensions
    from q_tau, then ``steps`` transitions of ``matrix(T)`` at each stage length T."""
    V = lm.vocab_size
    law = np.array([1.0])  # over the empty response
    prev: list[tuple[int, ...]] = [()]
    for T in range(block_size, max_new_tokens + 1, block_size):
        seqs = sequences(V, T)
        ext = np.zeros(len(seqs))
        for j, y in enumerate(seqs):
            base = prev.index(y[: T - block_size]) if T > block_size else 0
            ext[j] = law[base] * math.exp(lm.score(prompt + y[: T - block_size], y[T - block_size :], tau)[1])
        law = ext @ np.linalg.matrix_power(matrix(T), steps)
        prev = seqs
    return law



def entropycut_matrix(lm: ReferenceLM, prompt: tuple[int, ...], length: int, kernel) -> np.ndarray:
    """EntropyCut's transition matrix: cuts from the cut law written from its definition
    here (lambda(c; x) ∝ max(0, h_c - h_{c-1})^beta + FLOOR, Delta_0 = 0, h from the LM's
    p0), log A from the kernel's own ``decide`` (which must add the reverse-over-forward
    cut-law term for the matrix to leave pi_alpha invariant)."""
    from presto_sgl.kernels.entropycut import FLOOR

    tau, beta = kernel.temperature, kernel.beta
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}

    def scored(prefix: tuple[int, ...], suffix: tuple[int, ...]):
        ctx, lq, lp, h = list(prompt + prefix), [], [], []
        for t in suffix:
            logp, logq, _ = lm.distribution(ctx, tau)
            lq.append(float(logq[t]))
            lp.append(float(logp[t]))
            h.append(float(-np.sum(np.exp(logp) * logp)))
            ctx.append(t)
        return tuple(lq), tuple(lp), tuple(h)

    def cut_law(h: tuple[float, ...]) -> np.ndarray:
        w = np.array([(max(0.0, h[j] - h[j - 1]) if j else 0.0) ** beta + FLOOR for j in range(length)])
        return w / w.sum()

    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        i = index[x]
        lq_x, lp_x, h_x = scored((), x)
        state = ChainState(prompt, x, lq_x, lp_x, h_x)
        lam = cut_law(h_x)
        for c in range(length):
            for suf in itertools.product(range(lm.vocab_size), repeat=length - c):
                lq_y, lp_y, h_y = scored(x[:c], suf)
                _, tr = kernel.decide(state, [Proposal(c, suf, lq_y, lp_y, h_y)], _DRAWS)
                P[i, index[x[:c] + suf]] += lam[c] * math.exp(math.fsum(lq_y)) * math.exp(tr.log_accept)
        P[i, i] += 1.0 - P[i].sum()
    return P


def _mixture_weights(lm: ReferenceLM, prefix: tuple[int, ...], length: int, alpha: float, temps: tuple[float, ...],
                     wrong: bool) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """(suffixes, Q(suffix), w(suffix)) after ``prefix``, from the definitions: Q the uniform
    mixture over ``temps`` of whole-suffix q_tau, w = p0(suffix)^alpha / Q(suffix). ``wrong``
    gives the weight a naive implementation might use: p0^alpha / q_1 (the first temperature
    only), which the kernel must not use."""
    sufs = sequences(lm.vocab_size, length)
    Q, W = np.zeros(len(sufs)), np.zeros(len(sufs))
    for i, s in enumerate(sufs):
        lp = lm.score(prefix, s)[0]
        qs = [math.exp(lm.score(prefix, s, t)[1]) for t in temps]
        Q[i] = sum(qs) / len(temps)
        W[i] = math.exp(alpha * lp) / (qs[0] if wrong else Q[i])
    return sufs, Q, W


def _sum_atoms(Q: np.ndarray, W: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Atoms (values sorted, probabilities) of the sum of ``n`` i.i.d. weights W(z), z ~ Q."""
    vals, probs = np.zeros(1), np.ones(1)
    for _ in range(n):
        vals = (vals[:, None] + W[None, :]).ravel()
        probs = (probs[:, None] * Q[None, :]).ravel()
    order = np.argsort(vals, kind="stable")
    return vals[order], probs[order]


def _expected_inverse_max(a: float, b: np.ndarray, vals: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """E[1 / max(A, B)] for A = a + S, B = b + S' and each b, S and S' i.i.d. with atoms
    (vals, probs): the sum over A's atoms of P(B <= A) / A plus over B's of P(A < B) / B.
    Ties are structural (A and B are sums of the same weights in another order), so A and B
    within a relative 1e-9 count as equal: each pair falls in exactly one of the two sums."""
    cdf = np.concatenate(([0.0], np.cumsum(probs)))
    A = a + vals  # (n,)
    B = b[:, None] + vals[None, :]  # (len(b), n)
    tie = 1e-9
    b_le_a = cdf[np.searchsorted(vals, A[None, :] * (1 + tie) - b[:, None], side="right")]
    a_lt_b = cdf[np.searchsorted(vals, B * (1 - tie) - a, side="left")]
    return (b_le_a * (probs / A)[None, :]).sum(1) + (a_lt_b * probs[None, :] / B).sum(1)


def multitry_matrix(lm: ReferenceLM, prompt: tuple[int, ...], length: int, kernel, wrong_weight: bool = False) -> np.ndarray:
    """MultiTryMH's transition matrix from its definition (never the library's acceptance):
    cut c ~ Unif{0..T-1}; m candidates and m - 1 references i.i.d. from the temperature
    mixture Q after x_{0:c}; select y w.p. w(y) / W; accept w.p. min(1, W / W*). Summed
    over the m slots the selection may take,

        P_c(x -> y) = m Q(y) w(y) E[1 / max(w(y) + S, w(x) + S')],   y_suf != x_suf,

    S, S' independent sums of m - 1 i.i.d. weights (the other candidates, the references)."""
    m, temps, alpha = kernel.tries, kernel.temperatures, kernel.alpha
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}
    P = np.zeros((len(seqs), len(seqs)))
    for c in range(length):
        for prefix in sequences(lm.vocab_size, c):
            sufs, Q, W = _mixture_weights(lm, prompt + prefix, length - c, alpha, temps, wrong_weight)
            vals, probs = _sum_atoms(Q, W, m - 1)
            rows = [index[prefix + s] for s in sufs]
            for ix, a in enumerate(W):
                e = _expected_inverse_max(a, W, vals, probs)
                move = m * Q * W * e / length
                move[ix] = 0.0  # the same suffix: no move
                P[rows[ix], rows] += move
    P[np.diag_indices_from(P)] += 1.0 - P.sum(axis=1)
    return P
