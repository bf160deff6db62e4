"""Layer 2: coupling (paper Prop. 1). For the same keys on a seeded engine, every PreSTO
rule visits exactly the states of sequential execution of the same MH kernel, transition
by transition: tokens and their per-token log q / log p0, bit for bit on the reference
engine. Path keys couple BFS and the predictive rule (with an online, cut-dependent test
predictor) with the path-keyed sequential sampler; step keys couple the step rule, plain
and cost-aware (test predictor, synthetic clock), with the step-keyed one.

The factors: kernel (:data:`cases.KERNELS`) x rule x engine (the reference LM; the committed
tiny model on the embedded engine, where tokens and decisions are identical and log-probs
agree to float32 batch numerics) x target (fixed, eos) x the shared scheduler (off; on, with
merged or concurrent dispatch: several chains at once, each compared with its own sequential
chain) x budget x block schedule x (alpha, sharpness). Tier 1 runs an all-pairs covering
design of that space (:func:`covering.all_pairs`) after the combinations the guards below
need (every kernel x rule at the whole-subtree budget on the longest schedule, under both
targets: the BFS quirk, deferral, carry-over and race cuts act there). The full products
(fixed target: every budget x schedule x setting, and the tiny model; eos: two budgets) are
marked ``fullgrid`` (tier 2).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from presto_sgl import TraceWriter, read_trace
from presto_sgl.engines.base import Engine
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.scheduling.scheduler import Scheduler
from tests.support.cases import KERNELS, PRESTO_RULES, RULES, KernelCase, RuleCase, sequential_sampler
from tests.support.coupling import COUPLING_SCHEDULES, COUPLING_STOP, assert_same_states, run_states
from tests.support.covering import Case, all_pairs

pytestmark = pytest.mark.exactness

# (max_new_tokens, block_size, steps K)
SCHEDULES = [(8, 8, 1), (16, 8, 6), (24, 8, 12), (30, 10, 25)]
BUDGETS = [1, 2, 20]
"""1: PreSTO's rounds are sequential's calls; 2: the smallest prefetch (deferrals, carry-over);
20: the paper's N_pf, whole subtrees per call (the BFS quirk, the cost-aware cap). A budget in
between (5 until issue 29) exercised no path these do not."""
SETTINGS = [(4.0, 2.0), (2.0, 0.7)]  # (alpha, sharpness of the reference LM)
TINY_SETTING = (4.0, 3.0)  # (alpha, tau) on the tiny model
SEEDS = (0, 1)
"""Two chains per case (the grid, not the seeds, spans the paths)."""
SCHEDULED_PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
"""With the scheduler on, these chains run at once per seed (their calls merged or concurrent)."""

FACTORS: dict[str, list[Any]] = {
    "kernel": KERNELS,
    "rule": PRESTO_RULES,
    "engine": ["reference", "tiny-adder"],
    "ending": ["fixed", "eos"],
    "scheduler": ["off", "merged", "concurrent"],
    "budget": BUDGETS,
    "schedule": SCHEDULES,
    "setting": [0, 1],
}


def valid(case: Case) -> bool:
    """The tiny model runs one schedule and setting, fixed target, no scheduler, and no
    EntropyCut (see :attr:`KernelCase.state_cut`); the reference LM runs everything."""
    if case["engine"] == "reference":
        return True
    return (
        not case["kernel"].state_cut
        and (case["ending"], case["scheduler"], case["schedule"], case["setting"]) == ("fixed", "off", (16, 8, 6), 0)
        and case["budget"] in (2, 20)
    )


def case_of(kernel: KernelCase, rule: RuleCase, **factors: Any) -> Case:
    defaults = {"engine": "reference", "ending": "fixed", "scheduler": "off", "setting": 0}
    return {"kernel": kernel, "rule": rule, **defaults, **factors}


def required() -> Iterator[Case]:
    """The guards' configuration (n30-B10-K25, budget 20) for every kernel x rule, both targets."""
    for kernel in KERNELS:
        for rule in PRESTO_RULES:
            for target in ("fixed", "eos"):
                yield case_of(kernel, rule, ending=target, budget=20, schedule=SCHEDULES[-1])


def full_products() -> Iterator[Case]:
    """The tier-2 grids: fixed target (every budget x schedule x setting; the tiny model's
    cases), eos (a small budget on a short schedule, the full one on the longest)."""
    for kernel in KERNELS:
        for rule in PRESTO_RULES:
            for budget in BUDGETS:
                for schedule in SCHEDULES:
                    for setting in (0, 1):
                        yield case_of(kernel, rule, budget=budget, schedule=schedule, setting=setting)
            for budget in (2, 20):
                tiny = case_of(kernel, rule, engine="tiny-adder", budget=budget, schedule=(16, 8, 6))
                if valid(tiny):
                    yield tiny
            for budget, schedule in COUPLING_SCHEDULES.items():
                yield case_of(kernel, rule, ending="eos", budget=budget, schedule=schedule)


def case_id(case: Case) -> str:
    alpha, knob = TINY_SETTING if case["engine"] != "reference" else SETTINGS[case["setting"]]
    n, B, K = case["schedule"]
    sched = "" if case["scheduler"] == "off" else f"-sched-{case['scheduler']}"
    return (
        f"{case['kernel']}-{case['rule']}-N{case['budget']}-{case['engine']}-{case['ending']}{sched}"
        f"-n{n}-B{B}-K{K}-a{alpha}-{knob}"
    )


def coupling_cases() -> Iterator[Any]:
    """Every case of the covering design (tier 1) and of the full products (``fullgrid``)."""
    cases = {case_id(c): c for c in all_pairs(FACTORS, valid, required())}
    tier1 = set(cases)
    for c in full_products():
        cases.setdefault(case_id(c), c)
    for name, c in cases.items():
        yield pytest.param(c, id=name, marks=() if name in tier1 else (pytest.mark.fullgrid,))


@dataclass(frozen=True)
class Setup:
    engine: Engine
    prompt: list[int]
    power: dict[str, Any]
    logprob_tol: float  # 0: bit-exact ChainStates


def setup(request: pytest.FixtureRequest, case: Case) -> Setup:
    if case["engine"] == "reference":
        alpha, sharpness = SETTINGS[case["setting"]]
        lm = ReferenceLM(12, sharpness=sharpness, seed=3)
        stops = (COUPLING_STOP,) if case["ending"] == "eos" else ()
        return Setup(ReferenceEngine(lm, stop_ids=stops), [1, 2, 3], {"alpha": alpha, "ending": case["ending"]}, 0.0)
    # the tiny model is nearly deterministic: at tau = 1/alpha almost every proposal would be
    # accepted (MultiTryMH's tries too, at its default temperatures)
    alpha, tau = TINY_SETTING
    _, tok = request.getfixturevalue("tiny_adder")
    prompt = tok.encode("Q:47+385=", add_special_tokens=False)
    power = {"alpha": alpha, "tau": tau, "try_temperatures": (tau / 2, tau)}
    return Setup(request.getfixturevalue("tiny_engine"), prompt, power, 1e-4)


def scheduled_states(sampler, dispatch: str, seed: int) -> list[list[tuple]]:
    """Per prompt of :data:`SCHEDULED_PROMPTS`, the transitions of its chain, all chains run at
    once through a shared scheduler."""
    seen: list[list[tuple]] = [[] for _ in SCHEDULED_PROMPTS]

    def run_one(prompt, *, seed, prompt_id, **kwargs):
        def record(stage, k, st, tr):
            seen[prompt_id].append((stage, k, st, tr.accepted))

        return sampler.run(prompt, seed=seed, prompt_id=prompt_id, on_transition=record, **kwargs)

    scheduler = Scheduler.for_method(sampler, dispatch=dispatch, share_from=1)  # concurrent: the load cap from 1 chain
    run_prompts(run_one, SCHEDULED_PROMPTS, seed=seed, workers=len(SCHEDULED_PROMPTS), scheduler=scheduler)
    assert scheduler.stats.calls > 0
    return seen


@pytest.mark.parametrize("case", coupling_cases())
def test_presto_visits_the_sequential_states(request, case: Case):
    n, B, K = case["schedule"]
    kernel_case, rule, budget = case["kernel"], case["rule"], case["budget"]
    env = setup(request, case)
    cfg, presto = rule.configs(budget, **kernel_case.options(max_new_tokens=n, block_size=B, steps=K, **env.power))
    kernel = kernel_case.make(cfg)
    seq_sampler = sequential_sampler(env.engine, cfg, kernel, presto.keying)
    outcomes = set()
    for seed in SEEDS:
        if case["scheduler"] != "off":
            chains = scheduled_states(rule.sampler(env.engine, cfg, presto, kernel), case["scheduler"], seed)
            for i, (prompt, pre) in enumerate(zip(SCHEDULED_PROMPTS, chains)):
                seq, _ = run_states(seq_sampler, prompt, seed, prompt_id=i)
                assert len(seq) == len(pre) == K * (n // B), f"chain {i}"
                assert_same_states(seq, pre, 0.0)
                outcomes |= {acc for *_, acc in seq}
            continue
        seq, seq_result = run_states(seq_sampler, env.prompt, seed)
        pre, pre_result = run_states(rule.sampler(env.engine, cfg, presto, kernel), env.prompt, seed)
        assert len(seq) == len(pre) == K * (n // B)
        assert_same_states(seq, pre, env.logprob_tol)
        if env.logprob_tol == 0.0:
            assert pre_result.state == seq_result.state
        assert pre_result.state.tokens == seq_result.state.tokens
        m = pre_result.metrics
        assert m.transitions == K * (n // B)
        assert m.model_calls <= seq_result.metrics.model_calls
        if case["ending"] == "fixed":
            assert m.transitions == seq_result.metrics.model_calls
            if budget == 1:
                assert m.model_calls == seq_result.metrics.model_calls
        if case["engine"] != "reference":  # guard: the real model's runs prefetch and reuse KV
            assert m.model_calls < seq_result.metrics.model_calls and m.cached_tokens > 0
        outcomes |= {acc for *_, acc in seq}
    if case["engine"] != "reference":  # guard: both outcomes (else equality is trivial)
        assert outcomes == {True, False}


def test_the_covering_design_covers_every_pair():
    """Tier 1's cases hold every pair of factor values a valid case has, the required ones
    first, and are far fewer than the product."""
    from tests.support.covering import uncovered_pairs

    chosen = all_pairs(FACTORS, valid, required())
    assert not uncovered_pairs(FACTORS, valid, chosen)
    assert chosen[: len(list(required()))] == list(required())
    assert len(chosen) < 100


@pytest.fixture
def lm12():
    return ReferenceLM(12, sharpness=2.0, seed=3)


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_some_chains_accept_and_reject(kernel_case, reference_engine, lm12):
    """Guard: the coupling configurations exercise both outcomes (else equality is trivial)."""
    cfg, _ = RULES["sequential-step"].configs(
        **kernel_case.options(alpha=4.0, max_new_tokens=24, block_size=8, steps=12)
    )
    seen, _ = run_states(sequential_sampler(reference_engine(lm12), cfg, kernel_case.make(cfg), "step"), [1, 2, 3], 0)
    outcomes = {acc for *_, acc in seen}
    assert outcomes == {True, False}


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_keyings_give_different_chains(kernel_case, reference_engine, lm12):
    """Path and step keys are different randomizations: the check above is not vacuous."""
    engine = reference_engine(lm12)
    states = {}
    for keying in ("path", "step"):
        cfg, _ = RULES[f"sequential-{keying}"].configs(
            **kernel_case.options(alpha=4.0, max_new_tokens=24, block_size=8, steps=12)
        )
        states[keying] = sequential_sampler(engine, cfg, kernel_case.make(cfg), keying).run([1, 2, 3], seed=0).state
    assert states["path"] != states["step"]


def traced_run(sampler, prompt, seed):
    buf = io.StringIO()
    metrics = sampler.run(prompt, seed=seed, context=RunContext(trace=TraceWriter(buf))).metrics
    return metrics, read_trace(io.StringIO(buf.getvalue()))


def long_run(rule: RuleCase, budget: int, kernel_case: KernelCase, engine):
    """The sampler of the longest coupling schedule (n30-B10-K25, alpha 4)."""
    cfg, presto = rule.configs(budget, **kernel_case.options(alpha=4.0, max_new_tokens=30, block_size=10, steps=25))
    return rule.sampler(engine, cfg, presto, kernel_case.make(cfg))


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_coupling_runs_exercise_deferral_quirk_and_carry_over(kernel_case, reference_engine, lm12):
    """Guard: the rounds above really defer (BFS quirk) and carry proposals over (step)."""
    engine = reference_engine(lm12)
    bfs, bfs_records = traced_run(long_run(RULES["bfs"], 20, kernel_case, engine), [1, 2, 3], 0)
    assert bfs.model_calls > 3  # several rounds per stage
    if kernel_case.state_cut:
        # a prefetched cut (the race over the root's positions) lost to the realized state's tail:
        # the decision was deferred and realized later at another cut
        requested = {
            (c["stage"], r["decision"], r["cut"]) for c in bfs_records if c["type"] == "call" for r in c["requests"]
        }
        realized = {(n["stage"], n["decision"]) for n in bfs_records if n["type"] == "node"}
        realized_cut = {(n["stage"], n["decision"], n["cut"]) for n in bfs_records if n["type"] == "node"}
        assert any((s, d) in realized and (s, d, c) not in realized_cut for s, d, c in requested if d is not None)
    else:
        assert bfs.requests_unreachable > 0
    carried = []
    for seed in range(4):  # EntropyCut carries less: a depth's cut moves with the state's entropies
        _, records = traced_run(long_run(RULES["step"], 5, kernel_case, engine), [1, 2, 3], seed)
        carried += [rec for rec in records if rec["type"] == "node" and rec["request"][0] < rec["call"]]
    assert carried, "no proposal was carried over to a later round"


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_coupling_runs_exercise_the_predictive_rule(kernel_case, reference_engine, lm12):
    """Guard: the predictive rule plans several rounds per stage and other requests than BFS,
    none unreachable, while its online predictor refits on the realized decisions."""
    engine = reference_engine(lm12)
    planned, metrics = {}, {}
    for name in ("predictive", "bfs"):
        sampler = long_run(RULES[name], 5, kernel_case, engine)
        metrics[name], records = traced_run(sampler, [1, 2, 3], 0)
        calls = [r for r in records if r["type"] == "call" and r["kind"] == "mh"]
        planned[name] = [[q["decision"] for q in c["requests"]] for c in calls]
        if name == "predictive":
            assert len(sampler.planner.predictor.observations) == metrics[name].transitions
    assert len(planned["predictive"]) > 3 * 3 and metrics["predictive"].requests_unreachable == 0
    assert planned["predictive"] != planned["bfs"]


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_coupling_runs_exercise_the_cost_aware_budget(kernel_case, reference_engine, lm12):
    """Guard: the cost-aware step rule sends batches of several sizes below the budget (the
    step rule's prefix), uses carried-over proposals, and feeds its predictor and clock."""
    sampler = long_run(RULES["step-cost"], 20, kernel_case, reference_engine(lm12))
    metrics, records = traced_run(sampler, [1, 2, 3], 0)
    # decisions per call (a MultiTryMH decision sends 2m - 1 requests)
    sizes = {len({q["decision"] for q in r["requests"]}) for r in records if r["type"] == "call" and r["kind"] == "mh"}
    assert len(sizes) >= 3 and min(sizes) < 5
    assert any(r["type"] == "node" and r["request"][0] < r["call"] for r in records)
    planner = sampler.planner
    assert len(planner.predictor.observations) == metrics.transitions
    assert planner.time_model.calls == metrics.model_calls


@pytest.mark.parametrize("rule", ["bfs-cost", "predictive-cost"])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_coupling_runs_exercise_the_path_cost_budget(kernel_case, rule, reference_engine, lm12):
    """Guard: the cost-aware path rules send several batch sizes below the budget (after the
    exploration calls) and feed their predictor and clock."""
    sampler = long_run(RULES[rule], 20, kernel_case, reference_engine(lm12))
    metrics, records = traced_run(sampler, [1, 2, 3], 0)
    sizes = [len({q["decision"] for q in r["requests"]}) for r in records if r["type"] == "call" and r["kind"] == "mh"]
    assert len(set(sizes[4:])) >= 2 and max(sizes[4:]) < 20
    planner = sampler.planner
    assert len(planner.predictor.observations) == metrics.transitions
    assert planner.time_model.calls == metrics.model_calls
