"""Cost-aware step planner vs fixed budgets on synthetic call-time laws (docs/design.md §5).

Runs PreSTO (step keys) on the reference engine and charges every MH call the time of a
synthetic law t = theta . (1, rows, decode steps, decoded tokens) (forks decode in
lockstep: steps = T - smallest cut of the call). Fixed budgets do not depend on the law
(one run each, re-priced per law); each cost-aware planner runs once per law and is fed
the law's times (its time model fits them).
One planner (time model, online predictor) serves all chains of a law, as in a CLI run.
Prints transitions per synthetic second of MH call time (extension calls excluded).

    python -m benchmarks.cost_aware_sim [--prompts 4] [--seeds 2] [--budgets 20 10]

(The retired renewal and myopic objectives were compared here until issue 24; RESULTS.md
keeps what they measured.)
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import threading
import time

from presto_sgl import Sampler, TraceWriter, read_trace, sampling_configs
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.planners import CostAware, RolloutPolicy, RoundFeedback, StepPlanner
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor import ConstantPredictor, OnlinePredictor, load_predictor

LAWS = {
    # seconds per (call, row, decode step, decoded token, step with two rows or more)
    "A embedded": (0.0, 0.074, 0.072, 0.0058, 0.0),
    "B sglang-cpu": (0.5, 0.0, 0.0, 0.026, 0.0),
    "C gpu-like": (0.3, 0.0, 0.01, 0.0002, 0.0),
}
FIXED = (1, 2, 4, 8, 10, 12, 16, 20)


def law_time(new_tokens, law) -> float:
    return float(CallTimeModel.features(new_tokens) @ law) if new_tokens else 0.0


class PlanTimer:
    """Planning time over every run of a planner (shared by its per-run copies)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0
        self.plans = 0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
            self.plans += 1


class ClockedPlanner(CostAware):
    """The step rule with the rollout budget (``RolloutPolicy``'s arguments), its feedback
    carrying the synthetic law's call time. Its per-run copies (:meth:`CostAware.for_run`)
    share the law and the timer."""

    def __init__(self, law, *args, **kwargs) -> None:
        self.rollout = RolloutPolicy(*args, **kwargs)
        super().__init__(StepPlanner(), self.rollout)
        self.law = law
        self.timer = PlanTimer()

    def plan(self, ctx):
        t0 = time.perf_counter()
        out = super().plan(ctx)
        self.timer.add(time.perf_counter() - t0)
        return out

    def observe(self, feedback: RoundFeedback) -> None:
        t = law_time([new for _, new in feedback.requests], self.law)
        super().observe(dataclasses.replace(feedback, time_s=t))


def predictor():
    """The shipped predictor refit online; if the package has none, an online fit from the class prior."""
    try:
        return load_predictor("default", online=True)
    except ValueError:
        return OnlinePredictor(ConstantPredictor())


def run_chains(sampler, prompts, seeds):
    """(transitions, [new-token lists of every MH call]) over all chains."""
    transitions, calls = 0, []
    for i, p in enumerate(prompts):
        for s in seeds:
            buf = io.StringIO()
            transitions += sampler.run(
                p, seed=s, prompt_id=i, context=RunContext(trace=TraceWriter(buf))
            ).metrics.transitions
            calls += [
                [q["new_tokens"] for q in r["requests"]]
                for r in read_trace(io.StringIO(buf.getvalue()))
                if r["type"] == "call" and r["kind"] == "mh"
            ]
    return transitions, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--n", type=int, default=48, help="response tokens T (one block)")
    ap.add_argument("--steps", type=int, default=20, help="K")
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--sharpness", type=float, default=2.0)
    ap.add_argument("--budgets", type=int, nargs="+", default=[20, 10], help="N of the cost-aware runs")
    ap.add_argument("--laws", nargs="+", default=list(LAWS), choices=list(LAWS))
    ap.add_argument("--samples", type=int, default=32)
    args = ap.parse_args()
    t_start = time.perf_counter()
    engine = ReferenceEngine(ReferenceLM(args.vocab, sharpness=args.sharpness, seed=0))
    power = dict(alpha=args.alpha, max_new_tokens=args.n, block_size=args.n, steps=args.steps)
    prompts = [[(3 * i + j) % args.vocab for j in range(8)] for i in range(args.prompts)]
    seeds = range(args.seeds)
    fixed = {
        b: run_chains(Sampler(engine, *sampling_configs("step", budget=b, **power)), prompts, seeds) for b in FIXED
    }
    print(
        f"reference LM V={args.vocab} sharpness={args.sharpness}; T={args.n} K={args.steps} alpha={args.alpha}; "
        f"{args.prompts} prompts x {args.seeds} seeds; transitions per synthetic second (MH calls)"
    )
    names = [f"fix{b}" for b in FIXED] + [f"roll@{N}" for N in args.budgets]  # the rollout objective
    print(f"{'law':<14}" + "".join(f"{n:>10}" for n in names) + f"{'best fix':>10}")
    for law_name in args.laws:
        law = LAWS[law_name]
        row = []
        for b in FIXED:
            tr, calls = fixed[b]
            row.append(tr / sum(law_time(c, law) for c in calls))
        notes = []
        for N in args.budgets:
            planner = ClockedPlanner(law, predictor(), samples=args.samples)
            config, presto = sampling_configs("step", budget=N, cost_aware=True, **power)
            sampler = Sampler(engine, config, presto, planner=planner)
            tr, calls = run_chains(sampler, prompts, seeds)
            row.append(tr / sum(law_time(c, law) for c in calls))
            sizes = [len(c) for c in calls]
            notes.append(
                f"rollout@{N}: {len(calls)} calls, mean n {sum(sizes) / len(sizes):.1f}, "
                f"plan {1e3 * planner.timer.seconds / max(planner.timer.plans, 1):.1f} ms/call, "
                f"match {planner.rollout.match:.2f}"
            )
        best = max(range(len(FIXED)), key=lambda j: row[j])
        print(f"{law_name:<14}" + "".join(f"{x:>10.3f}" for x in row) + f"{'fix' + str(FIXED[best]):>10}")
        for n in notes:
            print(f"{'':<14}{n}")
    print("fixed budgets: calls " + ", ".join(f"N={b}: {len(fixed[b][1])}" for b in FIXED))
    print(f"total {time.perf_counter() - t_start:.1f}s")


if __name__ == "__main__":
    main()
