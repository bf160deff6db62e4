"""The cost-aware planner's per-run copies (``for_run``) for a subclass with its own
constructor and settings, as benchmarks/cost_aware_sim.py has, and the guard that
``for_run`` resets every piece of the library planner's per-run state.

(What is left of the retired objectives' tests: the renewal and myopic objectives were
removed with their benchmark copy, issue 24; the library's own planner is tested in
tests/unit/test_costaware.py.)"""

from __future__ import annotations

from presto_sgl import ChainState
from presto_sgl.planners import CostAwareStepPlanner, RoundContext, RoundFeedback
from presto_sgl.predictor.certainty import ConstantPredictor
from presto_sgl.proposals import ProposalStore
from tests.support.predictors import CutPredictor
from tests.support.timing import SyntheticClock
from tests.unit.planning_helpers import KERNEL, Forced


class Clocked(CostAwareStepPlanner):
    """A subclass with its own constructor and settings (as benchmarks/cost_aware_sim.py has)."""

    def __init__(self, law: float, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.law = law


def test_for_run_of_a_subclass_shares_the_learners_and_not_the_round_state():
    planner = Clocked(0.25, CutPredictor(), SyntheticClock(), (1.0,) * 10, samples=8, horizon=12, seed=3)
    run = planner.for_run()
    assert type(run) is Clocked and run is not planner and run.law == 0.25
    assert run.predictor is planner.predictor and run.time_model is planner.time_model
    assert run.match_rate is planner.match_rate
    assert (run.explore, run.samples, run.horizon, run.seed) == ((1.0,) * 10, 8, 12, 3)
    # Round state is per run: a root planned by one run is not the other's previous root.
    cuts = {0: 4, 1: 2, 2: 6, 3: 1, 4: 0}
    draws = lambda k: Forced(cuts[k])  # noqa: E731
    root = ChainState((99,), (0, 1, 2, 3, 4, 5, 6, 7), (0.0,) * 8, (0.0,) * 8)
    later = ChainState((99,), (0, 1, 2, 3, 4, 9, 9, 9), (0.0,) * 8, (0.0,) * 8)
    run.plan(RoundContext(root, "", 0, 5, 3, draws, ProposalStore(), KERNEL, "step"))
    other = planner.for_run()
    other.plan(RoundContext(later, "110", 3, 2, 3, draws, ProposalStore(), KERNEL, "step"))
    assert planner.match == 0.0
    run.plan(RoundContext(later, "110", 3, 2, 3, draws, ProposalStore(), KERNEL, "step"))
    assert other.match == 0.75  # learned by one run, shared with all
    run.observe(RoundFeedback(8, ((2, 0.0),), ((5, 6),), 0.5))
    assert other.time_model.calls == 1


def test_per_run_state_of_the_library_planner_is_what_for_run_resets():
    """Guard: ``for_run`` copies the planner and resets ``_previous`` and ``last_base``; a
    new per-run attribute of the library's planner must be reset too."""
    shared = {"predictor", "time_model", "explore", "samples", "horizon", "seed", "match_rate"}
    assert set(vars(CostAwareStepPlanner(ConstantPredictor()))) - shared == {"_previous", "last_base"}
