"""One method protocol: every registered method (each MH kernel by each rule, each baseline)
runs with the same ``run`` signature, returns a SampleResult, and writes a trace that
``read_trace``, ``metrics_from_trace`` and ``resume`` accept."""

from __future__ import annotations

import io
import json

import pytest

from presto_sgl import Method, SampleResult, make_method, metrics_from_trace, read_trace, registry
from presto_sgl.chain.trace import RECORD_TYPES, TraceWriter
from presto_sgl.cli.main import main
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.execution.resume import read_checkpoint, truncate

PROMPT = [1, 2, 3]
SCHEDULE = {"max_new_tokens": 8, "block_size": 4, "steps": 3, "alpha": 4.0}
OWN = {"multitry": {"tries": 2}, "bestofn": {"best_of": 3}, "powersmc": {"particles": 3, "ramp_tokens": 4}}


def cases():
    for name in registry.KERNELS:
        for rule in registry.RULES:
            yield pytest.param(
                name, {"rule": rule, **({"budget": 4} if rule != "sequential" else {})}, id=f"{name}-{rule}"
            )
    for name in registry.BASELINES:
        yield pytest.param(name, {}, id=name)


def engine() -> ReferenceEngine:
    return ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))


@pytest.mark.parametrize("name, extra", cases())
def test_every_method_writes_a_trace_the_library_reads_back(tmp_path, name, extra):
    options = {"method": name, **SCHEDULE, **OWN.get(name, {}), **extra}
    method = make_method(engine(), options)
    assert isinstance(method, Method) and method.name == name and method.describe()["method"] == name
    path = tmp_path / "t.jsonl"
    with open(path, "w") as f:
        result = method.run(
            PROMPT, seed=5, prompt_id="p", context=RunContext(trace=TraceWriter(f)), info={"engine": "reference"}
        )
    assert isinstance(result, SampleResult) and result.state.length == SCHEDULE["max_new_tokens"]

    records = read_trace(path.read_text().splitlines(keepends=True))
    assert {r["type"] for r in records} <= set(RECORD_TYPES)
    assert records[0]["type"] == "run" and records[-1]["type"] == "summary"
    assert records[0]["method"] == name and records[0]["prompt"] == PROMPT and records[0]["engine"] == "reference"
    assert records[-1]["tokens"] == list(result.state.tokens)
    (recomputed,) = metrics_from_trace(records)
    assert recomputed == result.metrics

    checkpoint = read_checkpoint(path)  # a finished trace resumes to the same response
    assert checkpoint.finished and checkpoint.run["method"] == name
    truncate(path, checkpoint.offset)
    with open(path, "a") as f:
        again = make_method(engine(), options).run(
            PROMPT,
            seed=5,
            prompt_id="p",
            context=RunContext(trace=TraceWriter(f), resume=checkpoint),
            info={"engine": "reference"},
        )
    assert again.state.tokens == result.state.tokens
    assert [r["type"] for r in read_trace(path.read_text().splitlines(keepends=True))][-1] == "summary"


@pytest.mark.parametrize("name", list(registry.BASELINES))
def test_a_baseline_trace_from_the_cli_reads_back_and_resumes(tmp_path, capsys, name):
    trace = tmp_path / f"{name}.jsonl"
    base = ["sample", "--engine", "reference", "--method", name, "--block-size", "4", "--json"]
    assert main([*base, "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--trace", str(trace)]) == 0
    first = json.loads(capsys.readouterr().out)
    records = read_trace(io.StringIO(trace.read_text()))
    assert records[0]["type"] == "run" and len(metrics_from_trace(records)) == 1
    assert main([*base, "--max-new-tokens", "8", "--resume", str(trace)]) == 0
    assert json.loads(capsys.readouterr().out)["response_ids"] == first["response_ids"]
    assert main([*base, "--max-new-tokens", "4", "--resume", str(trace)]) == 2  # another config: refused, named
    assert "`--max-new-tokens` (trace 8, now 4)" in capsys.readouterr().err
