"""Exact laws of suffix-resampling MH kernels on an enumerable reference LM (test helper).

States are all V^T responses. Every matrix is written here from its kernel's definition,
with the LM's own probabilities, never from the library's acceptance code (a wrong
acceptance that still looks like an MH rule would otherwise pass every law test).
PowerMH (cut c ~ Unif{0..T-1}, suffix from q_tau):

    P[x, y] = (1/T) sum_c [y_{0:c} = x_{0:c}] q_tau(y_{c+1:T} | x_{0:c}) A_c(x, y),
    A_c(x, y) = min(1, pi_alpha(y) q_tau(x_{c+1:T} | x_{0:c}) / (pi_alpha(x) q_tau(y_{c+1:T} | y_{0:c}))),
    P[x, x] += 1 - sum_y P[x, y].

The chain law after the block schedule is the extension law q_tau(block | x) pushed
through P_T^K stage by stage (:func:`chain_law`, for any kernel's matrix).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from presto_sgl.kernels import PowerMHKernel


class LM(Protocol):
    """What the laws read of a model: the reference LM, or one whose q is masked by a constraint."""

    vocab_size: int

    def distribution(
        self, context: Sequence[int], temperature: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def score(self, prefix: Sequence[int], tokens: Sequence[int], temperature: float = 1.0) -> tuple[float, float]: ...


def sequences(vocab: int, length: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(vocab), repeat=length))


def target(lm: LM, prompt: tuple[int, ...], length: int, alpha: float) -> np.ndarray:
    """pi_alpha over all responses of ``length`` tokens (normalized)."""
    logw = np.array([alpha * lm.score(prompt, x)[0] for x in sequences(lm.vocab_size, length)])
    w = np.exp(logw - logw.max())
    return w / w.sum()


def per_token(lm: LM, context: tuple[int, ...], tokens: tuple[int, ...], tau: float):
    """(log q_tau, log p0) of each of ``tokens`` after ``context``."""
    ctx, lq, lp = list(context), [], []
    for t in tokens:
        logp, logq, _ = lm.distribution(ctx, tau)
        lq.append(float(logq[t]))
        lp.append(float(logp[t]))
        ctx.append(t)
    return tuple(lq), tuple(lp)


def powermh_matrix(
    lm: LM, prompt: tuple[int, ...], length: int, kernel: PowerMHKernel, flipped: bool = False
) -> np.ndarray:
    """PowerMH's transition matrix over responses of ``length`` tokens at the kernel's alpha
    and tau, from the definition above. ``flipped``: the proposal terms swapped (the law of
    the sabotage in ``tests/support/cases.py``)."""
    alpha, tau = kernel.alpha, kernel.temperature
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}
    log_pi = {x: alpha * math.fsum(per_token(lm, prompt, x, tau)[1]) for x in seqs}  # unnormalized

    def log_q(x: tuple[int, ...], c: int) -> float:
        """log q_tau(x_{c+1:T} | x_{0:c})."""
        return math.fsum(per_token(lm, prompt + x[:c], x[c:], tau)[0])

    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        i = index[x]
        for c in range(length):
            for suf in itertools.product(range(lm.vocab_size), repeat=length - c):
                y = x[:c] + suf
                q_fwd, q_rev = log_q(y, c), log_q(x, c)
                if flipped:
                    q_fwd, q_rev = q_rev, q_fwd
                log_a = min(0.0, log_pi[y] - log_pi[x] + q_rev - q_fwd)
                P[i, index[y]] += math.exp(log_q(y, c)) * math.exp(log_a) / length
        P[i, i] += 1.0 - P[i].sum()
    return P


def chain_law(
    lm: LM,
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
            base = prev.index(y[: T - block_size]) if block_size < T else 0
            ext[j] = law[base] * math.exp(lm.score(prompt + y[: T - block_size], y[T - block_size :], tau)[1])
        law = ext @ np.linalg.matrix_power(matrix(T), steps)
        prev = seqs
    return law


def entropycut_matrix(lm: LM, prompt: tuple[int, ...], length: int, kernel, inverted: bool = False) -> np.ndarray:
    """EntropyCut's transition matrix from its definition: cut c ~ lambda(c; x) ∝
    max(0, h_c - h_{c-1})^beta + FLOOR (Delta_0 = 0, h the p0 entropies along x), suffix from
    q_tau, and

        A_c(x, y) = min(1, pi_alpha(y) lambda(c; y) q_tau(x_{c+1:T} | .)
                           / (pi_alpha(x) lambda(c; x) q_tau(y_{c+1:T} | .))).

    ``inverted``: the cut-law ratio turned over (the law of the sabotage in cases.py)."""
    alpha, tau = kernel.alpha, kernel.temperature
    seqs = sequences(lm.vocab_size, length)
    index = {s: i for i, s in enumerate(seqs)}
    cut_law = entropy_cut_law(kernel.beta)
    full = {x: _scored(lm, prompt, x, tau) for x in seqs}
    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        i = index[x]
        lq_x, lp_x, h_x = full[x]
        lam = cut_law(h_x)
        for c in range(length):
            for suf in itertools.product(range(lm.vocab_size), repeat=length - c):
                y = x[:c] + suf
                lq_y, lp_y, h_y = full[y]
                cut_term = math.log(cut_law(h_y)[c]) - math.log(lam[c])
                log_a = min(
                    0.0,
                    alpha * (math.fsum(lp_y) - math.fsum(lp_x))
                    + math.fsum(lq_x[c:])
                    - math.fsum(lq_y[c:])
                    + (-cut_term if inverted else cut_term),
                )
                P[i, index[y]] += lam[c] * math.exp(math.fsum(lq_y[c:])) * math.exp(log_a)
        P[i, i] += 1.0 - P[i].sum()
    return P


def _mixture_weights(
    lm: LM, prefix: tuple[int, ...], length: int, alpha: float, temps: tuple[float, ...], wrong: bool
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
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


def multitry_matrix(lm: LM, prompt: tuple[int, ...], length: int, kernel, wrong_weight: bool = False) -> np.ndarray:
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


# -- the EOS-terminated target (docs/design.md §2.1) -----------------------------------------
#
# States at horizon H are the responses that end at their first stop token or at H: 1..H
# tokens with a stop token last and nowhere before, or H tokens without one. pi_alpha(x) ∝
# p0(x)^alpha over them (the events "x is generated" partition the sequence space, so p0
# sums to 1 there). A kernel cuts at c ~ lambda(c; x) over the current length L(x), draws a
# suffix from q_tau until a stop token or H, and accepts with
#
#     A_c(x, y) = min(1, pi(y) lambda(c; y) q_tau(x_{c+1:} | x_{0:c}) / (pi(x) lambda(c; x) q_tau(y_{c+1:} | x_{0:c}))).


def continuations(vocab: int, n: int, stop: frozenset[int]) -> list[tuple[int, ...]]:
    """Every suffix a draw of at most ``n`` tokens can return: it ends at its first stop
    token, or has ``n`` tokens and none."""
    out: list[tuple[int, ...]] = []
    frontier: list[tuple[int, ...]] = [()]
    for _ in range(n):
        grown: list[tuple[int, ...]] = []
        for s in frontier:
            for t in range(vocab):
                (out if t in stop else grown).append(s + (t,))
        frontier = grown
    return out + frontier


def reachable(lm, context: tuple[int, ...], suffixes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The ``suffixes`` q_tau can draw after ``context``: all of them, unless ``lm`` masks q (a
    structured target's :class:`tests.support.structured.MaskedLM`: log q = -inf off the language)."""
    return [s for s in suffixes if math.isfinite(lm.score(context, s)[1])]


def _scored(lm: LM, context: tuple[int, ...], tokens: tuple[int, ...], tau: float):
    """(log q_tau, log p0, p0 entropy) of each of ``tokens`` after ``context``."""
    ctx, lq, lp, h = list(context), [], [], []
    for t in tokens:
        logp, logq, _ = lm.distribution(ctx, tau)
        lq.append(float(logq[t]))
        lp.append(float(logp[t]))
        h.append(float(-np.sum(np.exp(logp) * logp)))
        ctx.append(t)
    return tuple(lq), tuple(lp), tuple(h)


def uniform_cut_law(h: tuple[float, ...]) -> np.ndarray:
    """PowerMH's and MultiTryMH's cut law over a state of len(h) tokens: 1/L."""
    return np.full(len(h), 1.0 / len(h))


def entropy_cut_law(beta: float) -> Callable[[tuple[float, ...]], np.ndarray]:
    """EntropyCut's law over a state's own positions: w_j = max(0, h_j - h_{j-1})^beta + FLOOR."""
    from presto_sgl.kernels.entropycut import FLOOR

    def law(h: tuple[float, ...]) -> np.ndarray:
        w = np.array([(max(0.0, h[j] - h[j - 1]) if j else 0.0) ** beta + FLOOR for j in range(len(h))])
        return w / w.sum()

    return law


def ending_matrix(
    lm: LM,
    prompt: tuple[int, ...],
    horizon: int,
    stop: frozenset[int],
    alpha: float,
    tau: float,
    cut_law: Callable[[tuple[float, ...]], np.ndarray],
    reverse_law: Callable[[tuple[float, ...], tuple[float, ...]], np.ndarray] | None = None,
) -> np.ndarray:
    """The transition matrix over ``continuations(V, horizon, stop)`` of suffix resampling
    with ``cut_law`` (from a state's entropies) under the EOS-terminated target, from the
    definition above. ``reverse_law(h_y, h_x)``: the law the *acceptance* uses for lambda(.; y)
    (default: ``cut_law(h_y)``; a sabotage passes another), the move itself always cuts by
    ``cut_law(h_x)``."""
    seqs = reachable(lm, prompt, continuations(lm.vocab_size, horizon, stop))
    index = {s: i for i, s in enumerate(seqs)}
    full = {x: _scored(lm, prompt, x, tau) for x in seqs}
    P = np.zeros((len(seqs), len(seqs)))
    for x in seqs:
        lq_x, lp_x, h_x = full[x]
        lam = cut_law(h_x)
        for c in range(len(x)):
            for z in reachable(lm, prompt + x[:c], continuations(lm.vocab_size, horizon - c, stop)):
                y = x[:c] + z
                lq_y, lp_y, h_y = full[y]
                lam_y = cut_law(h_y) if reverse_law is None else reverse_law(h_y, h_x)
                log_a = min(
                    0.0,
                    alpha * (math.fsum(lp_y) - math.fsum(lp_x))
                    + math.fsum(lq_x[c:])
                    - math.fsum(lq_y[c:])
                    + math.log(lam_y[c])
                    - math.log(lam[c]),
                )
                P[index[x], index[y]] += lam[c] * math.exp(math.fsum(lq_y[c:]) + log_a)
        P[index[x], index[x]] += 1.0 - P[index[x]].sum()
    return P


def ending_multitry_matrix(
    lm: LM, prompt: tuple[int, ...], horizon: int, stop: frozenset[int], kernel, length_term: bool = True
) -> np.ndarray:
    """MultiTryMH's matrix under the EOS-terminated target: cut c ~ Unif{0..L(x)-1}; the m
    candidates and m - 1 references from the temperature mixture Q after x_{0:c} (each until
    a stop token or the horizon); weights w(z) = p0(z_suf)^alpha lambda(c; z) / Q(z_suf) with
    lambda(c; z) = 1/L(z); then, as for fixed lengths,

        P_c(x -> y) = m Q(y) w(y) E[1 / max(w(y) + S, w(x) + S')].

    ``length_term=False``: weights without lambda (the sabotage's law)."""
    m, temps, alpha = kernel.tries, kernel.temperatures, kernel.alpha
    seqs = reachable(lm, prompt, continuations(lm.vocab_size, horizon, stop))
    index = {s: i for i, s in enumerate(seqs)}
    P = np.zeros((len(seqs), len(seqs)))
    prefixes = {x[:c] for x in seqs for c in range(len(x))}
    for prefix in prefixes:
        c = len(prefix)
        sufs = reachable(lm, prompt + prefix, continuations(lm.vocab_size, horizon - c, stop))
        Q, W = np.zeros(len(sufs)), np.zeros(len(sufs))
        for i, s in enumerate(sufs):
            lp = lm.score(prompt + prefix, s)[0]
            Q[i] = sum(math.exp(lm.score(prompt + prefix, s, t)[1]) for t in temps) / len(temps)
            W[i] = math.exp(alpha * lp) / Q[i] / ((c + len(s)) if length_term else 1.0)
        vals, probs = _sum_atoms(Q, W, m - 1)
        rows = [index[prefix + s] for s in sufs]
        for ix, a in enumerate(W):
            move = m * Q * W * _expected_inverse_max(a, W, vals, probs) / (c + len(sufs[ix]))
            move[ix] = 0.0  # the same suffix: no move
            P[rows[ix], rows] += move
    P[np.diag_indices_from(P)] += 1.0 - P.sum(axis=1)
    return P


def ending_target(lm: LM, prompt: tuple[int, ...], horizon: int, stop: frozenset[int], alpha: float) -> np.ndarray:
    """pi_alpha over ``continuations(V, horizon, stop)`` that q can reach (normalized)."""
    seqs = reachable(lm, prompt, continuations(lm.vocab_size, horizon, stop))
    logw = np.array([alpha * lm.score(prompt, x)[0] for x in seqs])
    w = np.exp(logw - logw.max())
    return w / w.sum()


def ending_chain_law(
    lm: LM,
    prompt: tuple[int, ...],
    max_new_tokens: int,
    block_size: int,
    steps: int,
    tau: float,
    stop: frozenset[int],
    matrix: Callable[[int], np.ndarray],
) -> np.ndarray:
    """Exact law of the final state (over continuations(V, max_new_tokens, stop)): at each
    stage an unended state is extended by up to B tokens from q_tau (ending at a stop token),
    an ended one is kept; then ``steps`` transitions of ``matrix(H)`` at the stage horizon H."""
    V = lm.vocab_size
    law = np.array([1.0])
    prev: list[tuple[int, ...]] = [()]
    for H in range(block_size, max_new_tokens + 1, block_size):
        seqs = reachable(lm, prompt, continuations(V, H, stop))
        index = {s: i for i, s in enumerate(seqs)}
        ext = np.zeros(len(seqs))
        for x, p in zip(prev, law):
            if x and x[-1] in stop:
                ext[index[x]] += p
                continue
            for z in reachable(lm, prompt + x, continuations(V, block_size, stop)):
                ext[index[x + z]] += p * math.exp(lm.score(prompt + x, z, tau)[1])
        law = ext @ np.linalg.matrix_power(matrix(H), steps)
        prev = seqs
    return law
