"""The shared scheduler (presto_sgl.scheduling.scheduler): exact chains, merged calls, the choice.

Coupling: 8 chains on 8 threads through the scheduler (merged calls; and each chain's
rows in a call of its own, capped by the load model) end in exactly the states of the
sequential chains of the same keys, for every kernel x PreSTO rule (seeded reference
engine). The choice: a chain always gets its first group, a chain alone keeps its own
choice, under load the rows of low use probability are the ones dropped. Failures reach
every chain of the call; a chain that leaves never holds a round.
"""

from __future__ import annotations

import threading
import time

import pytest

from presto_sgl.engines.base import Request
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.execution.offers import Offer
from presto_sgl.scheduling.pool import Cancelled
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.scheduling.scheduler import SHARE_FROM, LoadModel, Scheduler
from tests.support.cases import KERNELS, PRESTO_RULES, sequential_sampler

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [2, 2], [3, 1, 4, 1], [5, 9], [11, 0, 7]]
SEED = 11
POWER = dict(alpha=4.0, max_new_tokens=12, block_size=6, steps=6, tries=3)
COST_AWARE = {"bfs-cost", "predictive-cost", "step-cost"}


@pytest.fixture
def engine(reference_engine):
    return reference_engine(ReferenceLM(12, sharpness=2.0, seed=3))


@pytest.mark.parametrize("dispatch", ["merged", "concurrent", "concurrent-shared"])
@pytest.mark.parametrize("rule", PRESTO_RULES, ids=str)
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_scheduled_chains_are_the_sequential_chains(engine, kernel_case, rule, dispatch):
    """merged: one call per round; concurrent: the default (SHARE_FROM), each chain plans and calls
    alone (the per-chain rule); concurrent-shared: the load cap weighs the offers from 1 chain."""
    cfg, presto = rule.configs(10, **kernel_case.options(**POWER))
    sampler = rule.sampler(engine, cfg, presto, kernel_case.make(cfg))
    share_from = 1 if dispatch == "concurrent-shared" else SHARE_FROM
    scheduler = Scheduler.for_method(sampler, dispatch=dispatch.split("-")[0], share_from=share_from)
    scheduled = run_prompts(sampler.run, PROMPTS, seed=SEED, workers=8, scheduler=scheduler)
    seq = sequential_sampler(engine, cfg, kernel_case.make(cfg), presto.keying)
    for i, (r, p) in enumerate(zip(scheduled, PROMPTS)):
        assert r.state == seq.run(p, seed=SEED, prompt_id=i).state, f"chain {i} differs"
    s = scheduler.stats
    if dispatch == "concurrent":  # the default: each chain called its engine alone
        assert s.calls == 0
        return
    # every request a chain records went through the scheduler (an extension is one request;
    # a round whose depths were all carried over sends none)
    assert s.rows == sum(r.metrics.requests_issued + r.metrics.extend_calls for r in scheduled)
    assert s.offers <= sum(r.metrics.model_calls + r.metrics.extend_calls for r in scheduled)
    assert s.rows <= s.offered_rows
    assert 0 < sum(r.metrics.accepted for r in scheduled) < sum(r.metrics.transitions for r in scheduled)
    if dispatch == "merged":
        assert max(s.chains_per_call) > 1 and s.calls < s.offers  # calls were merged
        if rule.name in COST_AWARE:
            assert s.rows < s.offered_rows  # and chosen: some offered rows were not sent


def _offer(lengths: list[int], values: list[float] | None, preferred: int | None = None) -> Offer:
    groups = tuple((Request((1,), n, 1.0, None),) for n in lengths)
    return Offer(groups, tuple(values) if values is not None else None, preferred)


def _fitted(theta: tuple[float, float, float, float, float]) -> Scheduler:
    s = Scheduler(engine=None, explore=())  # type: ignore[arg-type]  # no engine: only the time model is used
    s.time_model.theta[:] = theta
    return s


def test_choose_keeps_the_first_group_and_a_lone_chains_choice():
    s = _fitted((0.0, 0.0, 0.0, 1.0, 0.0))  # pure per-token cost: extra rows never pay
    offers = [_offer([8, 8, 8], [1.0, 1.2, 1.3]), _offer([4, 4], [1.0, 1.1]), _offer([8, 8], None)]
    assert s.choose(offers) == [1, 1, 2]  # first groups; an offer without values goes whole
    assert s.choose([_offer([8, 8, 8], [1.0, 1.2, 1.3], preferred=3)]) == [3]  # alone: its own n


def test_choose_sends_rows_that_pay_and_skips_low_values_before_high_ones():
    s = _fitted((1.0, 0.0, 0.0, 0.01, 0.0))  # a call's fixed cost dominates: rows are cheap
    assert s.choose([_offer([8] * 4, [1.0, 2.0, 3.0, 4.0]), _offer([8] * 2, [1.0, 2.0])]) == [4, 2]
    s = _fitted((0.1, 0.0, 0.0, 0.1, 0.0))
    # the second group is nearly worthless but the third is sure: the extension to 3 pays
    got = s.choose([_offer([1, 1, 1], [1.0, 1.01, 2.5]), _offer([1, 1], [1.0, 1.01])])
    assert got == [3, 1]


def test_explore_fractions_before_the_model_is_fitted():
    s = Scheduler(engine=None)
    offers = [_offer([4] * 8, [float(i + 1) for i in range(8)]), _offer([4] * 2, [1.0, 2.0])]
    assert s.choose(offers) == [8, 2]  # first call: everything
    s.time_model.calls = 1
    assert s.choose(offers) == [1, 1]


def test_load_model_fits_step_cost_and_caps_only_under_load():
    m = LoadModel()
    offer = _offer([10] * 4, [1.0, 1.5, 1.8, 1.9], preferred=4)
    for rows_other, _per_step in ((0, 0.05), (20, 0.09), (60, 0.17)):  # tau(R) = 0.05 + 0.002 R (own 4 rows)
        m.observe(offer, 4, [g[0] for g in offer.groups], rows_other, 10 * (0.05 + 0.002 * (rows_other + 4)))
    assert m.a == pytest.approx(0.05, abs=1e-9) and m.b == pytest.approx(0.002, abs=1e-9)
    assert m.cap(offer, 0) == 4  # alone: the chain's own choice
    assert m.cap(offer, 500) == 2  # under load: rows below the average use share are dropped
    assert m.cap(_offer([10] * 2, None), 500) == 2  # no values: sent whole


class _Failing:
    def __init__(self) -> None:
        self.capabilities = None
        self.called_at: list[float] = []

    def generate(self, requests):
        self.called_at.append(time.monotonic())
        time.sleep(0.05)
        raise RuntimeError("backend down")


def test_a_failed_call_reaches_every_chain_in_it_and_a_leaving_chain_frees_the_round():
    engine = _Failing()
    s = Scheduler(engine, max_wait_s=10.0)  # the longest wait allowed: far from the bound below
    errors: list[str] = []
    started = threading.Barrier(3)
    asked: list[float] = []

    def chain() -> None:
        with s.chain():
            started.wait()
            asked.append(time.monotonic())
            try:
                s.generate([Request((1,), 2, 1.0, None)])
            except RuntimeError as exc:
                errors.append(str(exc))

    def leaver() -> None:  # registered, then gone without a call: the round must not wait 10 s for it
        with s.chain():
            started.wait()

    threads = [threading.Thread(target=chain), threading.Thread(target=chain), threading.Thread(target=leaver)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == ["backend down", "backend down"]
    # One round for both chains, begun without waiting for the leaver (that takes max_wait_s, 10 s,
    # from the first call asked)
    assert len(engine.called_at) == 1 and engine.called_at[0] - min(asked) < 5.0
    assert s.stats.calls == 0


def test_a_lane_runs_its_chains_check_before_each_call():
    """A chain's lane runs the chain's check (a pool's: its request's ticket) before its offer
    reaches a round: a cancelled chain stops without a backend call."""
    engine = _Failing()
    s = Scheduler(engine)
    checked: list[int] = []

    def check() -> None:
        checked.append(1)
        raise Cancelled("gone")

    with s.chain(check) as lane, pytest.raises(Cancelled, match="gone"):
        lane.submit(Offer(((Request((1,), 2, 1.0, None),),)))
    assert checked == [1] and engine.called_at == []


def test_serve_with_the_scheduler_answers_as_without():
    """presto-sgl serve's chains through the scheduler (4 chains of a request at once, merged
    calls) give the answers the chains give alone: same seed, same texts."""
    from tests.integration.test_serve import PROMPT, reference
    from tests.support.serving import client, make_service, serving

    answers = {}
    for scheduled in (False, True):
        service = make_service(
            reference(), "reference", concurrency=4, scheduler=scheduled, rule="step", cost_aware=True
        )
        with serving(service) as url:
            r = client(url).completions.create(
                model="reference", prompt=PROMPT, max_tokens=16, n=4, extra_body={"seed": 5}
            )
        answers[scheduled] = [c.text for c in r.choices]
        if scheduled:
            assert max(service.pool.scheduler.stats.chains_per_call) > 1
    assert answers[True] == answers[False] and len(set(answers[True])) > 1


def test_the_concurrent_dispatch_shares_from_share_from_chains_in_flight():
    s = Scheduler(engine=None, dispatch="concurrent", share_from=3)
    merged = Scheduler(engine=None, dispatch="merged", share_from=3)
    with s.chain() as a, s.chain() as b, merged.chain() as m:
        assert not a.sharing() and not b.sharing() and m.sharing()  # 2 in flight: each plans alone
        with s.chain() as c:
            assert a.sharing() and c.sharing()  # 3: the offers are weighed
        assert not a.sharing()
    default = Scheduler(engine=None, dispatch="concurrent")
    with default.chain() as a, default.chain(), default.chain(), default.chain() as d:
        assert SHARE_FROM is None and not a.sharing() and not d.sharing()  # the default: never
    with pytest.raises(ValueError, match="share_from"):
        Scheduler(engine=None, share_from=0)
