"""Property-based tests (hypothesis) of everything a user can type or a crash can leave:
config validators, token-id parsing, the radix tree against a dictionary model, and trace
reading (truncated and corrupted lines: a clear error naming the line, never a wrong metric)
and its state records (each the change from the last, replayed to the very states written)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from presto_sgl import ChainState, ConfigError, PowerConfig, PrestoConfig, TraceWriter, sampling_configs
from presto_sgl.chain.trace import StateReplay, metrics_from_trace, read_trace
from presto_sgl.cli.sample import _prompt_ids
from presto_sgl.engines.reference import ReferenceEngine
from presto_sgl.execution.context import RunContext
from presto_sgl.execution.resume import EmptyTrace, read_checkpoint
from presto_sgl.samplers import Sampler
from radix.tree import RadixTree, TreeFullError

RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
"""No deadlines or speed checks: the machine may be shared; the properties, not the timing, are tested."""

FIELDS = (
    "alpha",
    "max_new_tokens",
    "block_size",
    "steps",
    "tau",
    "keying",
    "method",
    "beta",
    "tries",
    "try_temperatures",
)
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.floats(0.01, 2.0), max_size=3).map(tuple),
)


# -- config validators ----------------------------------------------------------------
def cfg_default(name: str):
    config, presto = PowerConfig(), PrestoConfig("sequential")
    return {**config.target.describe(), **config.kernel.describe(), **dataclasses.asdict(presto)}.get(name)


@settings(RELAXED, max_examples=400)
@given(st.dictionaries(st.sampled_from(FIELDS), anything, max_size=4))
def test_power_config_is_valid_or_names_the_bad_argument(kwargs):
    """Flat options (the schedule, a kernel and kernels' own parameters) make a valid config or
    a ConfigError whose ``param`` is one given, named first in its message."""
    try:
        cfg, presto = sampling_configs("sequential", **kwargs)
    except ConfigError as exc:
        named = re.findall(r"`(\w+)`", str(exc))
        given = kwargs.get(exc.param, cfg_default(exc.param))
        assert named[0] == exc.param and (exc.value is given or exc.value == given), str(exc)
        assert exc.param in kwargs or (exc.param == "max_new_tokens" and "block_size" in kwargs), str(exc)
        return
    t = cfg.target
    assert t.alpha > 0 and math.isfinite(t.alpha) and cfg.temperature > 0
    assert t.max_new_tokens % t.block == 0 and t.num_stages >= 1 and cfg.kernel.steps >= 0
    assert presto.keying in ("path", "step")


@settings(RELAXED, max_examples=300)
@given(
    rule_=anything | st.sampled_from(["sequential", "bfs", "predictive", "step"]),
    budget=anything,
    cost_aware=anything | st.booleans(),
)
def test_presto_config_is_valid_or_names_the_bad_argument(rule_, budget, cost_aware):
    try:
        p = PrestoConfig(rule=rule_, budget=budget, cost_aware=cost_aware)
    except (ValueError, TypeError) as exc:
        assert re.search(r"`(rule|budget|cost_aware)`", str(exc)), str(exc)
        return
    assert p.rule in ("sequential", "bfs", "predictive", "step") and p.budget >= 1
    assert not (p.cost_aware and p.sequential)


# -- token ids --------------------------------------------------------------------------
@settings(RELAXED)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=20))
def test_prompt_ids_round_trip(ids):
    assert _prompt_ids(",".join(map(str, ids))) == ids
    assert _prompt_ids(", ".join(map(str, ids)) + ",") == ids


@settings(RELAXED)
@given(st.text(max_size=20))
def test_prompt_ids_parse_or_refuse_with_an_example(text):
    import argparse

    try:
        ids = _prompt_ids(text)
    except argparse.ArgumentTypeError as exc:
        assert "comma-separated token ids such as 1,2,3" in str(exc)
        return
    assert all(isinstance(i, int) for i in ids)


# -- the radix tree against a dictionary model -----------------------------------------------
tokens = st.lists(st.integers(0, 3), max_size=8).map(tuple)


class RadixModel(RuleBasedStateMachine):
    """The tree must store exactly a prefix-closed set of sequences: the model keeps the set
    of stored prefixes. Eviction may drop any unlocked leaf, never a locked path."""

    locks = Bundle("locks")

    def __init__(self) -> None:
        super().__init__()
        self.tree = RadixTree(max_tokens=24)
        self.locked: list[tuple[int, ...]] = []

    def stored(self) -> set[tuple[int, ...]]:
        return {()} | {s[:i] for s in self.tree.sequences() for i in range(len(s) + 1)}

    def longest(self, t: tuple[int, ...]) -> int:
        stored = self.stored()
        return max(i for i in range(len(t) + 1) if t[:i] in stored)

    @rule(t=tokens)
    def insert(self, t):
        want, before = self.longest(t), self.stored()
        try:
            hit = self.tree.insert(t)
        except TreeFullError:  # only when the locked tokens and the insert path leave no room
            assert self.tree.protected_tokens + len(t) > 24 and self.stored() <= before
            return
        assert hit == want
        assert t in self.stored()

    @rule(t=tokens)
    def match(self, t):
        want = self.longest(t)
        assert self.tree.match_prefix(t).length == want

    @rule(target=locks, t=tokens)
    def lock(self, t):
        m = self.tree.match_prefix(t)
        self.tree.inc_lock_ref(m.node)
        self.locked.append(t[: m.length])
        return (m.node, t[: m.length])

    @rule(held=locks)
    def unlock(self, held):
        node, t = held
        if t in self.locked and node.lock_ref > 0:
            self.tree.dec_lock_ref(node)
            self.locked.remove(t)

    @rule(n=st.integers(0, 30))
    def evict(self, n):
        before = self.tree.evictable_tokens  # every unlocked node can go: locks pin their ancestors
        freed = self.tree.evict(n)
        assert min(n, before) <= freed <= before and self.tree.evictable_tokens == before - freed

    @invariant()
    def consistent(self):
        stored = self.stored()
        assert all(t in stored for t in self.locked), "a locked prefix was evicted"
        assert self.tree.total_tokens == len(stored) - 1  # every non-empty stored prefix is one token
        assert self.tree.total_tokens <= 24
        assert self.tree.evictable_tokens + self.tree.protected_tokens == self.tree.total_tokens


TestRadixModel = RadixModel.TestCase
TestRadixModel.settings = settings(RELAXED, max_examples=150, stateful_step_count=30)


# -- traces: truncated and corrupted lines ---------------------------------------------------
def _trace() -> str:
    from presto_sgl.config import sampling_configs

    cfg, presto = sampling_configs("bfs", budget=4, max_new_tokens=8, block_size=4, steps=4)
    stream = io.StringIO()
    Sampler(ReferenceEngine(), cfg, presto).run(
        [1, 2],
        seed=3,
        context=RunContext(trace=TraceWriter(stream)),
    )
    return stream.getvalue()


TRACE = _trace()


@settings(RELAXED, max_examples=200)
@given(cut=st.integers(0, len(TRACE)))
def test_a_truncated_trace_resumes_from_a_real_boundary(tmp_path_factory, cut):
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_text(TRACE[:cut])
    try:
        cp = read_checkpoint(path)
    except EmptyTrace:
        assert "\n" not in TRACE[:cut]
        return
    kept = TRACE.encode()[: cp.offset].decode()
    assert kept.endswith("\n") and TRACE.startswith(kept)
    last = json.loads(kept.splitlines()[-1])
    assert last["type"] in ("state", "run")
    assert len(cp.nodes) == sum(json.loads(line)["type"] == "node" for line in kept.splitlines())


@settings(RELAXED, max_examples=200)
@given(line=st.integers(0, TRACE.count("\n") - 2), junk=st.sampled_from(["{", "", "null", "[1]", '{"type": 3}', "x"]))
def test_a_corrupt_line_is_named_never_misread(tmp_path_factory, line, junk):
    lines = TRACE.splitlines()
    assume(junk != "")  # a blank line is skipped by read_trace by design
    lines[line] = junk
    text = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"line {line + 1} is corrupt"):
        read_checkpoint(path)
    with pytest.raises(ValueError, match=f"line {line + 1} is not"):
        read_trace(io.StringIO(text))


@settings(RELAXED, max_examples=100)
@given(line=st.integers(1, TRACE.count("\n") - 2), field=st.sampled_from(["requests", "index", "decision", "cut"]))
def test_a_record_missing_a_field_is_an_error_never_a_wrong_metric(line, field):
    records = read_trace(io.StringIO(TRACE))
    rec = records[line]
    assume(rec["type"] in ("call", "node") and field in rec)
    del rec[field]
    with pytest.raises(ValueError, match=f"trace record {line + 1} .* is malformed"):
        metrics_from_trace(records)


# -- state records as changes ---------------------------------------------------------
values = st.floats(-30.0, 0.0, allow_nan=False)


@st.composite
def edits(draw):
    """A chain of states with entropy: each keeps a prefix of the last (a suffix replaced or
    appended, or only a value changed under the same tokens, as a re-scored row can)."""
    n = draw(st.integers(1, 12))
    state = ChainState(
        (9,),
        tuple(draw(st.lists(st.integers(0, 31), min_size=n, max_size=n))),
        (-1.0,) * n,
        (-2.0,) * n,
        entropy=(-0.5,) * n,
    )
    states = [state]
    for _ in range(draw(st.integers(0, 8))):
        cut = draw(st.integers(0, state.length))
        if draw(st.booleans()):  # the same state again: a rejected round
            states.append(state)
            continue
        m = draw(st.integers(0 if cut < state.length else 1, 6))
        tokens = (
            state.tokens[cut : cut + m]
            if draw(st.booleans())
            else tuple(draw(st.lists(st.integers(0, 31), min_size=m, max_size=m)))
        )
        m = len(tokens)
        lq = tuple(draw(st.lists(values, min_size=m, max_size=m)))
        state = state.replace_suffix(cut, tokens, lq, tuple(draw(st.lists(values, min_size=m, max_size=m))), lq)
        states.append(state)
    return states


@settings(RELAXED, max_examples=300)
@given(states=edits())
def test_state_records_replay_every_state_and_keep_what_they_can(states):
    buf = io.StringIO()
    writer = TraceWriter(buf)
    writer.write("run", {})
    for i, s in enumerate(states):
        writer.state(1, i, "", s)
    replay = StateReplay((9,))
    records = [r for r in read_trace(buf.getvalue().splitlines()) if r["type"] == "state"]
    for prev, s, rec in zip([None, *states], states, records):
        assert replay.apply(rec) == s
        if prev is not None:  # the longest prefix kept with all its values, nothing more
            c = rec["keep"]
            assert all(a[:c] == b[:c] for a, b in zip(_arrays(prev), _arrays(s)))
            assert c == min(prev.length, s.length) or any(
                a[c : c + 1] != b[c : c + 1] for a, b in zip(_arrays(prev), _arrays(s))
            )
    assert records[0]["keep"] == 0


def _arrays(s: ChainState):
    return s.tokens, s.logq, s.logp, s.entropy


def test_a_state_record_that_keeps_more_than_there_is_is_an_error():
    replay = StateReplay((9,))
    rec = {"keep": 2, "tokens": [1], "logq": [-1.0], "logp": [-1.0], "entropy": None, "logq_at": None}
    with pytest.raises(ValueError, match="keeps 2 tokens of the previous state, which is no state"):
        replay.apply(rec)
    replay.apply({**rec, "keep": 0, "tokens": [1, 2], "logq": [-1.0, -1.0], "logp": [-1.0, -1.0]})
    with pytest.raises(ValueError, match="which is a state of 2 tokens"):
        replay.apply({**rec, "keep": 3})


def test_a_trace_grows_by_accepted_suffixes_not_by_T_per_round():
    """A 2-stage T = 64 sequential chain: every round writes a state record; together they are
    far smaller than whole states would be, and they replay to the states the chain visited."""
    cfg, presto = sampling_configs("sequential", max_new_tokens=64, block_size=32, steps=12)
    buf, seen = io.StringIO(), []
    Sampler(ReferenceEngine(), cfg, presto).run(
        [1, 2], seed=3, context=RunContext(trace=TraceWriter(buf)), on_transition=lambda stage, k, s, tr: seen.append(s)
    )
    records = [r for r in read_trace(buf.getvalue().splitlines()) if r["type"] == "state"]
    replay = StateReplay((1, 2))
    replayed = [replay.apply(r) for r in records]
    assert [r for r in replayed if r.length == 64][1:] == [s for s in seen if s.length == 64]
    written = sum(len(r["tokens"]) for r in records)
    assert written < 0.5 * sum(s.length for s in replayed)
