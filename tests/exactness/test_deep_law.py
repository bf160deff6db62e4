"""Unseeded law tests deep and wide enough for the machinery that makes PreSTO fast to act.

On an unseeded engine every request is a fresh draw, so any rule that chose which draws to
use by their content would bias the chain; only there can the law test see such a bug.
The shallow law tests (test_enumerated_target.py: K = 2, budget 3) never carry a proposal
over to a later round and rarely defer one. Here K = 6 transitions per block (two blocks
of 2 tokens, vocab 3: 81 final states) with budget 3, so that the walk outruns every
call: each test counts, from the chains' traces, the transitions served by a proposal from
an earlier call (carry-over, step keys), the rounds that stopped at a decision with no
valid draw (deferral), and the BFS requests below a deferred node (the quirk), and asserts
that each occurred.

Power: :func:`detectable_tv` is the total-variation shift the chi-square test (significance
0.001) detects with probability 0.9 when the shift moves mass between the two likeliest
final states (the hardest direction for the test). With the chains here that is about
0.01 for the step rule and 0.02-0.03 for the others; each failure message names it.

Chains per rule, from the noncentrality per chain (lambda) of plausible bugs measured on
these settings (chi-square statistic minus df, over 1,500-20,000 chains): a content-triggered
deferral (the walker drops a draw whose first token is 0 and defers) lambda ~ 0.007 (bfs),
0.012 (step), 0.014 (predictive), 0.019 (step-cost); the uniform-per-stage mutant ~ 0.065; a
dropped prefix check (stale-prefix) 0.019 (step); content-dependent discarding of carried-over
draws ~ 0.0005 (step: only carried draws are touched), which alone needs the step rule's 80,000.
At 0.001 the test needs lambda ~ 57 for power 0.9 and ~ 80 for 0.99; bfs (12,000: ~ 80),
predictive (12,000: ~ 160) and step-cost (6,000: ~ 110) keep power >= 0.99 against the deferral
bug. step-cost (its cost-aware rollouts make it ~ 8x dearer per chain than step) shares step's
keys, walker and carry-over with the step case and differs from it only in which draws its
planner requests.

The chains' events come from their call and node records (:class:`Records`), the very records
a trace file holds, without writing and parsing JSON (half of a step chain's time).
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pytest
from scipy import stats

from presto_sgl import TraceWriter
from presto_sgl.chain.metrics import CallRecord, NodeRecord
from presto_sgl.execution.context import RunContext
from tests.support import exact
from tests.support.cases import KERNELS, RULES
from tests.support.enumerated import PROMPT, SIGNIFICANCE, chi_square_pvalue, exact_law, lm

pytestmark = [pytest.mark.exactness, pytest.mark.law]

SCHEDULE = dict(max_new_tokens=4, block_size=2, steps=6)
BUDGET = 3
CHAINS = {"step": 80_000, "step-cost": 6_000, "bfs": 12_000, "predictive": 12_000}
"""More chains where the rule is cheap and where carry-over (the issue's example bug) acts."""
TV_BOUND = {"step": 0.011, "step-cost": 0.032, "bfs": 0.025, "predictive": 0.025}
"""What :func:`detectable_tv` must stay below with these chains (the power the test claims)."""


class Records(TraceWriter):
    """A trace kept as the record objects (calls and nodes) instead of JSON lines."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.records: list[dict] = []

    def write(self, record_type: str, payload: dict) -> None:
        pass  # run, state and summary records: not needed here

    def call(self, record: CallRecord) -> None:
        self.records.append({"type": "call", **vars(record), "requests": [vars(q) for q in record.requests]})

    def node(self, record: NodeRecord) -> None:
        self.records.append({"type": "node", **vars(record)})

    def state(self, *args: object) -> None:
        pass


def detectable_tv(law: np.ndarray, chains: int, power: float = 0.9) -> float:
    """The TV shift between the two likeliest cells that the chi-square test detects with
    probability ``power`` at :data:`SIGNIFICANCE` with ``chains`` samples."""
    df = int((law * chains >= 5).sum())  # cells after pooling, minus one, roughly
    crit = stats.chi2.isf(SIGNIFICANCE, df)
    lam = next(x for x in np.arange(1.0, 500.0, 0.5) if stats.ncx2.sf(crit, df, x) >= power)
    p1, p2 = np.sort(law)[-2:]
    return math.sqrt(lam / (chains * (1 / p1 + 1 / p2)))


def events(records: Iterable[dict]) -> Counter:
    """Carry-overs, deferrals and unreachable (quirk) requests in one chain's trace records. A round
    deferred a decision when its walk stopped before the stage's K transitions (no valid draw)."""
    out: Counter = Counter()
    calls: dict[int, dict] = {}  # the mh call records by index
    walked: Counter[int] = Counter()  # transitions walked per call
    for r in records:
        if r["type"] == "call" and r["kind"] == "mh":
            calls[r["index"]] = r
            out["unreachable"] += sum(not q["reachable"] for q in r["requests"])
        elif r["type"] == "node":
            out["carry-over"] += r["request"][0] != r["call"]
            walked[r["call"]] += 1
    out["deferral"] = sum(c["k0"] + walked[i] < SCHEDULE["steps"] for i, c in calls.items())
    return out


@pytest.mark.parametrize("rule_name", sorted(CHAINS))
def test_deep_unseeded_chains_follow_the_exact_law(reference_engine, rule_name):
    model, kernel_case, rule = lm(), KERNELS[0], RULES[rule_name]
    cfg, presto = rule.configs(BUDGET, **kernel_case.options(alpha=4.0, **SCHEDULE))
    engine = reference_engine(model, seeded=False)
    sampler = rule.sampler(engine, cfg, presto, kernel_case.make(cfg))
    chains = CHAINS[rule_name]
    counts: Counter = Counter()
    seen: Counter = Counter()
    for i in range(chains):
        trace = Records()
        counts[sampler.run(PROMPT, seed=10_000 + i, context=RunContext(trace=trace)).state.tokens] += 1
        seen += events(trace.records)
    law = exact_law(kernel_case, cfg)
    tv_min = detectable_tv(law, chains)
    want = {
        "step": ("carry-over", "deferral"),
        "step-cost": ("carry-over", "deferral"),
        "bfs": ("deferral", "unreachable"),
        "predictive": ("deferral",),
    }[rule_name]
    for event in want:
        assert seen[event] > chains // 20, f"{event} occurred only {seen[event]} times in {chains} chains: {dict(seen)}"
    p, tv = chi_square_pvalue(counts, law, exact.sequences(model.vocab_size, cfg.target.max_new_tokens), chains)
    assert p > SIGNIFICANCE, (
        f"chi-square p={p:.2e} (TV={tv:.4f}; this test detects TV >= {tv_min:.4f}) rejects "
        f"the exact law; events {dict(seen)}"
    )
    assert tv_min < TV_BOUND[rule_name]
