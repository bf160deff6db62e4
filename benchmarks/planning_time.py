"""Planning time per call of each rule (coordinator overhead, docs/design.md §5): BFS, step, and
the predictive rule (best-first candidates + the DP of Eq. 19), at several budgets N_pf.

Each call plans a fresh round (a new stage, so the keyed draws are not yet cached, as in
the first round of a stage) for a root of T response tokens with K - k = --remaining
transitions left. The predictive rule is timed with the paper's class prior as a constant
predictor and, when it loads, the shipped logistic predictor; its two phases (candidate
generation, DP) are also timed apart. Times are thread CPU time per call.

    python -m benchmarks.planning_time [--T 512] [--remaining 100] [--budgets 20 64] [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from presto_sgl import ChainState, make_kernel, sampling_configs
from presto_sgl.chain.keys import ChainKeys, DecisionDraws, DecisionId, Keying
from presto_sgl.kernels.proposals import ProposalStore
from presto_sgl.planners import BFSPlanner, Planner, RoundContext, StepPlanner
from presto_sgl.planners.predictive import CandidateNode, PredictivePlanner, allocate, candidate_tree
from presto_sgl.predictor.certainty import ConstantPredictor, Predictor

PAPER_PRIOR = ConstantPredictor(2814 / 4621, 862 / 4621, 945 / 4621)
"""Class shares of the paper's PreSTO-PowerMH nodes (App. E.7): reject, uncertain, accept."""
T_in = TypeVar("T_in")
T_out = TypeVar("T_out")


def contexts(T: int, remaining: int, budget: int, calls: int, keying: Keying) -> list[RoundContext]:
    """Fresh rounds of the PowerMH kernel (alpha 4) with ``keying`` (the planner's keys)."""
    root = ChainState((0,), tuple(range(T)), (-1.0,) * T, (-1.0,) * T)
    keys = ChainKeys(7)
    kernel = make_kernel(sampling_configs("sequential", keying=keying, alpha=4.0)[0])
    out = []
    for stage in range(calls):
        cache: dict[DecisionId, DecisionDraws] = {}

        def draws(d: DecisionId, stage: int = stage, cache: dict = cache) -> DecisionDraws:
            if d not in cache:
                cache[d] = keys.decision(stage, d)
            return cache[d]

        out.append(
            RoundContext(
                root, "", 0, remaining, budget=budget, draws=draws, store=ProposalStore(), kernel=kernel, keying=keying
            )
        )
    return out


def timed(fn: Callable[[T_in], T_out], items: list[T_in]) -> tuple[float, float, list[T_out]]:
    """(median ms, 95th percentile ms, results) of ``fn`` over ``items``, in thread CPU time
    (on a shared machine wall time mostly measures preemption)."""
    times, results = [], []
    for item in items:
        t0 = time.thread_time()
        results.append(fn(item))
        times.append(1e3 * (time.thread_time() - t0))
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], results


def predictors() -> dict[str, Predictor]:
    out: dict[str, Predictor] = {"paper prior": PAPER_PRIOR}
    try:
        from presto_sgl.predictor import load_predictor

        out["logistic (default)"] = load_predictor("default")
    except (ImportError, ValueError) as exc:
        print(f"(shipped logistic predictor not timed: {exc})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, default=512, help="response tokens of the root state")
    ap.add_argument("--remaining", type=int, default=100, help="K - k, the depth cap")
    ap.add_argument("--budgets", type=int, nargs="+", default=[20, 64])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    preds = predictors()
    print(f"T={args.T}, K-k={args.remaining}, {args.calls} fresh rounds per row; CPU ms per call")
    head = f"{'rule':<34}{'N_pf':>5}{'median':>9}{'p95':>9}{'requests':>9}"
    print(head)
    print("-" * len(head))

    def row(name: str, budget: int, med: float, p95: float, requests: float | None = None) -> None:
        req = f"{requests:>9.1f}" if requests is not None else ""
        print(f"{name:<34}{budget:>5}{med:>9.3f}{p95:>9.3f}{req}")

    for budget in args.budgets:
        planners: dict[str, Planner] = {"bfs": BFSPlanner(), "step": StepPlanner()}
        planners |= {f"predictive, {name}": PredictivePlanner(p) for name, p in preds.items()}
        for name, planner in planners.items():
            keying = planner.keying or "step"
            med, p95, plans = timed(planner.plan, contexts(args.T, args.remaining, budget, args.calls, keying))
            row(name, budget, med, p95, statistics.mean(map(len, plans)))
        for name, pred in preds.items():
            rounds = contexts(args.T, args.remaining, budget, args.calls, "path")

            def tree(c: RoundContext, p: Predictor = pred) -> list[CandidateNode]:
                return candidate_tree(c, p, c.budget)

            def dp(nodes: list[CandidateNode], b: int = budget) -> tuple[float, list[CandidateNode]]:
                return allocate(nodes, b)

            med, p95, trees = timed(tree, rounds)
            row(f"  candidates, {name}", budget, med, p95)
            med, p95, _ = timed(dp, trees)
            row(f"  DP (Eq. 19), {name}", budget, med, p95)


if __name__ == "__main__":
    main()
