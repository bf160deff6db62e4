"""Exact resume (:mod:`presto_sgl.execution.resume`): a chain interrupted anywhere goes on from its
trace's last boundary to exactly the states of an uninterrupted run (seeded engine), and
to the exact K-step law (unseeded engine: every request a fresh draw).

Interruptions: a trace write cut off mid-line (what ``kill -9`` leaves), and an exception
raised inside an engine call (Ctrl-C mid-call), each at random points of the run. Real
signals against the CLI are in tests/integration/test_cli_resume.py.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter

import pytest

from presto_sgl import TraceWriter
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.execution.resume import EmptyTrace, check_same_run, read_checkpoint, truncate
from tests.support import exact
from tests.support.cases import KERNELS, RULES, KernelCase, RuleCase
from tests.support.enumerated import CHAINS, PROMPT, SIGNIFICANCE, chi_square_pvalue, config, exact_law, lm

pytestmark = pytest.mark.exactness

NODE_FIELDS = ("stage", "k", "decision", "cut", "log_accept", "uniform", "accepted", "selected")
"""What a transition is, whichever call fetched its proposal (calls may differ after a resume)."""


class Interrupted(BaseException):
    """Stands for Ctrl-C / kill: not an Exception, so nothing on the way catches it."""


class CutStream(io.StringIO):
    """A trace stream that dies inside its line ``line`` (counted from 0), after ``fraction`` of
    that line's characters. By line, not by a character count: a record's length varies from
    run to run (its timings), so a cut near the end of one run's text may lie past another's."""

    def __init__(self, line: int, fraction: float) -> None:
        super().__init__()
        self.line, self.fraction = line, fraction

    def write(self, s: str) -> int:
        done = self.getvalue().count("\n")
        for piece in s.splitlines(keepends=True):
            if done == self.line:
                super().write(piece[: int(self.fraction * len(piece))])
                raise Interrupted
            super().write(piece)
            done += piece.endswith("\n")
        return len(s)


class DyingEngine:
    """Forwards to ``inner`` and dies inside its ``calls``-th call (counted from 1)."""

    def __init__(self, inner, calls: int) -> None:
        self.inner, self.left = inner, calls
        self.capabilities, self.text = inner.capabilities, inner.text

    def generate(self, requests):
        self.left -= 1
        if self.left == 0:
            raise Interrupted
        return self.inner.generate(requests)


def nodes(trace_text: str) -> list[tuple]:
    return [tuple(r[f] for f in NODE_FIELDS) for r in map(json.loads, trace_text.splitlines()) if r["type"] == "node"]


def resume_from(tmp_path, text: str, make_sampler, name: str = "t.jsonl"):
    """Write the interrupted trace ``text``, resume it with a fresh sampler: (result, full trace)."""
    path = tmp_path / name
    path.write_text(text)
    try:
        checkpoint = read_checkpoint(path)
    except EmptyTrace:  # cut inside the run record: nothing to resume, the run starts again
        with open(path, "w") as f:
            return (
                make_sampler().run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(f))),
                path.read_text(),
                None,
            )
    truncate(path, checkpoint.offset)
    with open(path, "a") as f:
        result = make_sampler().run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(f), resume=checkpoint))
    return result, path.read_text(), checkpoint


def cases():
    for kernel in KERNELS:
        for rule in RULES.values():
            yield pytest.param(kernel, rule, 20 if kernel.name == "powermh" else 6, id=f"{kernel}-{rule}")


@pytest.mark.parametrize("kernel_case,rule,points", cases())
def test_a_run_interrupted_anywhere_resumes_to_the_same_chain(
    tmp_path, reference_engine, kernel_case: KernelCase, rule: RuleCase, points: int
):
    """Half the points cut a trace write (mid-line), half die inside an engine call."""
    cfg, presto = rule.configs(4, **kernel_case.options(alpha=4.0, max_new_tokens=16, block_size=8, steps=6))
    model = ReferenceLM(12, sharpness=2.0, seed=3)

    def make(engine=None):
        return rule.sampler(engine or reference_engine(model), cfg, presto, kernel_case.make(cfg))

    full_stream = io.StringIO()
    full = make().run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(full_stream)))
    full_text = full_stream.getvalue()
    calls = full.metrics.model_calls + full.metrics.extend_calls
    rng = random.Random(f"{kernel_case}-{rule}")
    stages_seen = set()
    stream: io.StringIO  # a CutStream or a plain one
    for i in range(points):
        if i % 2 == 0:
            stream, engine = CutStream(rng.randrange(full_text.count("\n")), rng.random()), None
        else:
            stream, engine = io.StringIO(), DyingEngine(reference_engine(model), rng.randint(1, calls))
        with pytest.raises(Interrupted):
            make(engine).run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(stream)))
        result, text, checkpoint = resume_from(tmp_path, stream.getvalue(), make)
        stages_seen.add(checkpoint.stage if checkpoint is not None else "none")
        assert result.state == full.state, f"point {i}: the resumed chain ended elsewhere"
        assert nodes(text) == nodes(full_text), f"point {i}: transitions lost, repeated or changed"
        assert result.metrics.transitions == full.metrics.transitions == cfg.kernel.steps * cfg.target.num_stages
    assert stages_seen >= {1, 2} or points < 20, f"interruptions did not cover every stage: {stages_seen}"


def test_a_finished_trace_resumes_to_its_result_without_calls(tmp_path, reference_engine):
    cfg, presto = RULES["bfs"].configs(4, alpha=4.0, max_new_tokens=16, block_size=8, steps=6)
    engine = reference_engine(ReferenceLM(12, seed=3))
    stream = io.StringIO()
    full = (
        RULES["bfs"]
        .sampler(engine, cfg, presto, KERNELS[0].make(cfg))
        .run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(stream)))
    )
    counted = DyingEngine(engine, calls=-1)  # never dies; counts down once per call
    make = lambda: RULES["bfs"].sampler(counted, cfg, presto, KERNELS[0].make(cfg))  # noqa: E731
    result, _, checkpoint = resume_from(tmp_path, stream.getvalue(), make)
    assert checkpoint.finished and result.state == full.state and result.metrics.transitions == 12
    assert counted.left == -1, "resuming a finished chain made model calls"


@pytest.mark.law
def test_unseeded_resume_follows_the_exact_law(tmp_path, reference_engine):
    """Each of CHAINS chains dies inside a random engine call and is resumed on a fresh
    unseeded engine (fresh draws); the final states must follow the exact K-step law."""
    model = lm()
    kernel_case, rule = KERNELS[0], RULES["sequential-path"]  # one call per transition: many mid-stage deaths
    cfg, presto = config("two-blocks", 4.0, "sequential-path")
    engine = reference_engine(model, seeded=False)
    rng = random.Random(0)
    counts: Counter = Counter()
    resumed_mid_stage = 0
    path = tmp_path / "t.jsonl"
    for i in range(CHAINS):
        stream = io.StringIO()
        dying = DyingEngine(engine, rng.randint(1, 6))  # 2 extensions + 4 transitions
        sampler = rule.sampler(dying, cfg, presto, kernel_case.make(cfg))
        try:
            result = sampler.run(PROMPT, seed=1000 + i, context=RunContext(trace=TraceWriter(stream)))
        except Interrupted:
            path.write_text(stream.getvalue())
            checkpoint = read_checkpoint(path)
            resumed_mid_stage += 0 < checkpoint.k < cfg.kernel.steps
            fresh = rule.sampler(engine, cfg, presto, kernel_case.make(cfg))
            result = fresh.run(PROMPT, seed=1000 + i, context=RunContext(resume=checkpoint))
        counts[result.state.tokens] += 1
    assert resumed_mid_stage > CHAINS // 5, f"only {resumed_mid_stage} chains were resumed in the middle of a stage"
    law = exact_law(kernel_case, cfg)
    p, tv = chi_square_pvalue(counts, law, exact.sequences(model.vocab_size, cfg.target.max_new_tokens), CHAINS)
    assert p > SIGNIFICANCE, f"chi-square p={p:.2e} (TV={tv:.3f}): resumed chains do not follow the exact law"


def test_traces_that_cannot_be_resumed_are_refused_naming_why(tmp_path, reference_engine):
    cfg, presto = RULES["step"].configs(4, alpha=4.0, max_new_tokens=16, block_size=8, steps=6)
    engine = reference_engine(ReferenceLM(12, seed=3))
    stream = io.StringIO()
    sampler = RULES["step"].sampler(engine, cfg, presto, KERNELS[0].make(cfg))
    sampler.run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(stream)))
    lines = stream.getvalue().splitlines(keepends=True)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:3]) + "{not json\n" + "".join(lines[3:]))
    with pytest.raises(ValueError, match="line 4 is corrupt"):
        read_checkpoint(path)
    path.write_text("".join(lines) * 2)
    with pytest.raises(ValueError, match="2 runs"):
        read_checkpoint(path)
    path.write_text("".join(lines[1:]))
    with pytest.raises(ValueError, match="no 'run' record first"):
        read_checkpoint(path)
    path.write_text("")
    with pytest.raises(EmptyTrace, match="no complete record"):
        read_checkpoint(path)
    path.write_text("".join(lines[:6]))
    checkpoint = read_checkpoint(path)
    other_cfg, _ = RULES["step"].configs(4, alpha=2.0, max_new_tokens=16, block_size=8, steps=6)
    other = RULES["step"].sampler(engine, other_cfg, presto, KERNELS[0].make(other_cfg))
    with pytest.raises(ValueError, match=r"`alpha` \(trace 4.0, now 2.0\)"):
        other.run([1, 2, 3], seed=7, context=RunContext(resume=checkpoint))
    with pytest.raises(ValueError, match=r"`seed` \(trace 7, now 8\)"):
        sampler.run([1, 2, 3], seed=8, context=RunContext(resume=checkpoint))
    with pytest.raises(ValueError, match="`prompt`"):
        sampler.run([1, 2, 4], seed=7, context=RunContext(resume=checkpoint))
    check_same_run("x", {"a": 1, "prompt_len": 3}, {"a": 1, "prompt_len": 4})  # derived fields are not compared


def test_a_trace_of_an_earlier_version_resumes_to_the_same_chain(tmp_path, reference_engine):
    """Earlier versions named the ending (fixed | eos) ``target`` in the run record; resume reads
    such a trace in today's words (:func:`~presto_sgl.execution.resume.current_record`)."""
    cfg, presto = RULES["step"].configs(4, alpha=4.0, max_new_tokens=16, block_size=8, steps=6)
    engine = reference_engine(ReferenceLM(12, seed=3))
    make = lambda: RULES["step"].sampler(engine, cfg, presto, KERNELS[0].make(cfg))  # noqa: E731
    stream = io.StringIO()
    whole = make().run([1, 2, 3], seed=7, context=RunContext(trace=TraceWriter(stream)))
    lines = stream.getvalue().splitlines(keepends=True)
    run = json.loads(lines[0])
    run["target"] = run.pop("ending")
    result, _, checkpoint = resume_from(tmp_path, json.dumps(run) + "\n" + "".join(lines[1:6]), make)
    assert checkpoint is not None and checkpoint.stage >= 1 and "ending" not in checkpoint.run
    assert result.state.tokens == whole.state.tokens
