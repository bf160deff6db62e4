"""The rollout budget's per-run copies (``for_run``) of a subclass with its own constructor
and settings (benchmarks/cost_aware_sim.py subclasses the composed planner likewise), and the
guard that ``for_run`` resets every piece of the library policy's per-run state.

(What is left of the retired objectives' tests: the renewal and myopic objectives were
removed with their benchmark copy, issue 24; the library's own planner is tested in
tests/unit/test_costaware.py.)"""

from __future__ import annotations

from presto_sgl.planners import CostAware, RolloutPolicy, RoundFeedback, StepPlanner
from presto_sgl.predictor.certainty import ConstantPredictor
from tests.support.predictors import CutPredictor
from tests.support.timing import SyntheticClock


class Clocked(RolloutPolicy):
    """A subclass with its own constructor and settings."""

    def __init__(self, law: float, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.law = law


def test_for_run_of_a_subclass_keeps_its_type_and_settings_and_shares_the_learners():
    planner = Clocked(0.25, CutPredictor(), SyntheticClock(), (1.0,) * 10, samples=8, horizon=12, seed=3)
    run = planner.for_run()
    composed = CostAware(StepPlanner(), planner).for_run()
    assert type(composed.policy) is Clocked and composed.policy is not planner
    assert type(run) is Clocked and run is not planner and run.law == 0.25
    assert run.predictor is planner.predictor and run.time_model is planner.time_model
    assert run.match_rate is planner.match_rate and run.end_lengths is planner.end_lengths
    assert (run.explore, run.samples, run.horizon, run.seed) == ((1.0,) * 10, 8, 12, 3)
    run.observe(RoundFeedback(8, ((2, 0.0),), ((5, 6),), 0.5))
    assert planner.for_run().time_model.calls == 1  # learned by one run, shared with all


def test_per_run_state_of_the_library_planner_is_what_for_run_resets():
    """Guard: ``for_run`` copies the planner and resets ``_previous`` and ``last_base``; a
    new per-run attribute of the library's planner must be reset too."""
    shared = {"predictor", "time_model", "explore", "samples", "horizon", "seed", "match_rate", "end_lengths"}
    assert set(vars(RolloutPolicy(ConstantPredictor()))) - shared == {"_previous", "last_base"}
