"""The EOS-terminated target's plumbing: engines that stop at stop tokens, the checks on what
they return, and the errors of a target the engine, model or kernel cannot serve. (Its
exactness: tests/exactness/test_ending_target.py.)"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from presto_sgl import CapabilityError, ConfigError, EngineError, Sampler, registry, sampling_configs
from presto_sgl.cli.main import main
from presto_sgl.cli.serve import ending_default
from presto_sgl.engines.base import Completion, Request, check_lengths
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.kernels import PowerMHKernel
from presto_sgl.kernels.mh import UniformCut
from presto_sgl.kernels.powermh import PowerMHParams
from presto_sgl.serve.parse import parse
from presto_sgl.serve.request import Defaults


def completion(tokens) -> Completion:
    return Completion(tuple(tokens), (-0.1,) * len(tokens), (-0.2,) * len(tokens))


def test_check_lengths_with_stop_tokens():
    req = Request((1, 2), 4, 1.0, stop=(7,))
    for good in ([7], [1, 7], [1, 2, 3, 4], [1, 2, 3, 7]):
        check_lengths(req, completion(good))
    for bad in ([], [1, 2], [7, 1], [1, 7, 2, 3], [1, 2, 3, 4, 5]):
        with pytest.raises(EngineError):
            check_lengths(req, completion(bad))
    with pytest.raises(EngineError):  # without stop tokens the length is exact
        check_lengths(Request((1, 2), 4, 1.0), completion([1, 7]))


def test_reference_engine_stops_where_the_unstopped_draw_has_its_first_stop_token():
    eng = ReferenceEngine(ReferenceLM(6, seed=2))
    for seed in range(20):
        (full,) = eng.generate([Request((1, 2), 12, 0.7, seed)])
        (cut,) = eng.generate([Request((1, 2), 12, 0.7, seed, stop=(3,))])
        n = full.tokens.index(3) + 1 if 3 in full.tokens else 12
        assert cut.tokens == full.tokens[:n] and cut.logq == full.logq[:n] and cut.logp == full.logp[:n]


def test_embedded_engine_stops_rows_alone(tiny_engine, tiny_adder):
    """A batch of rows with the stop token: each row is its unstopped draw cut after its first
    stop token; the other rows of the batch are unchanged (seeded, per-row generators)."""
    _, tok = tiny_adder
    stop = tiny_engine.text.stop_ids
    assert stop
    reqs = [
        Request(tuple(tok.encode(q, add_special_tokens=False)), 36, 3.0, 10 + i)
        for i, q in enumerate(("Q:47+385=", "Q:4+3=", "Q:12+9=", "Q:12+9="))
    ]
    full = tiny_engine.generate(reqs)
    cut = tiny_engine.generate([Request(r.prefix, 36, 3.0, r.seed, stop=stop) for r in reqs])
    lengths = set()
    for f, c in zip(full, cut):
        n = next((i + 1 for i, t in enumerate(f.tokens) if t in stop), 36)
        lengths.add(n)
        assert c.tokens == f.tokens[:n]
        assert max(abs(a - b) for a, b in zip(c.logp, f.logp[:n])) < 1e-4
    assert len(lengths) >= 3 and min(lengths) < 36  # rows of the batch end at different points
    assert tiny_engine.last_call.row_steps < tiny_engine.last_call.forward_steps * len(reqs)  # ended rows left


def test_a_target_the_engine_or_model_cannot_serve_is_refused():
    cfg, presto = sampling_configs("step", ending="eos", max_new_tokens=8, block_size=4)
    with pytest.raises(CapabilityError, match="stop tokens"):
        Sampler(ReferenceEngine(ReferenceLM(6)), cfg, presto)  # the model has none

    class NoStops(ReferenceEngine):
        def __init__(self):
            super().__init__(ReferenceLM(6), stop_ids=(3,))
            self.capabilities = type(self.capabilities)(seeded=True, entropy=True, vocab_size=6)

    with pytest.raises(CapabilityError, match="ends requests at stop tokens"):
        Sampler(NoStops(), cfg, presto)
    eng = ReferenceEngine(ReferenceLM(6), stop_ids=(3,))
    with pytest.raises(ConfigError, match="ends=True"):
        Sampler(eng, cfg, presto, kernel=PowerMHKernel(4.0, 0.25))
    fixed, _ = sampling_configs("step", max_new_tokens=8, block_size=4)
    with pytest.raises(ConfigError, match="ending='eos'"):
        Sampler(eng, fixed, presto, kernel=PowerMHKernel(4.0, 0.25, ends=True))
    with pytest.raises(ConfigError, match="ending"):
        sampling_configs("step", ending="short")


@dataclass(frozen=True)
class FixedOnly(UniformCut):
    """A registered kernel without an EOS-terminated form (no ``ends`` field)."""

    alpha: float
    temperature: float
    name: ClassVar[str] = "fixedonly"


def test_a_kernel_without_an_ending_form_is_refused_by_name():
    registry.register_kernel(registry.KernelSpec("fixedonly", PowerMHParams, lambda a, t, p: FixedOnly(a, t), "test"))
    try:
        cfg, _ = sampling_configs("sequential", method="fixedonly", ending="eos", max_new_tokens=8, block_size=4)
        with pytest.raises(ConfigError, match="no EOS-terminated form"):
            registry.make_kernel(cfg)
    finally:
        registry.unregister("fixedonly")


def test_cli_and_serve_take_the_target(capsys):
    args = [
        "sample",
        "--engine",
        "embedded",
        "--model",
        "tiny-adder",
        "--no-chat",
        "--prompt",
        "Q:4+3=",
        "--max-new-tokens",
        "36",
        "--block-size",
        "12",
        "--steps",
        "3",
        "--json",
    ]
    assert main([*args, "--ending", "eos"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["ending"] == "eos" and out["response_ids"][-1] == 19 and len(out["response_ids"]) < 36
    assert main([*args, "--ending", "fixed"]) == 0
    assert len(json.loads(capsys.readouterr().out)["response_ids"]) == 36
    assert main([*args, "--engine", "reference", "--ending", "eos"]) != 0
    assert "stop tokens" in capsys.readouterr().err
    defaults = Defaults(*sampling_configs("step", max_new_tokens=16, block_size=16, steps=2))
    assert parse({"prompt": [1, 2], "ending": "eos"}, "completions", defaults).config.target.ending == "eos"


def test_serve_defaults_to_the_responses_that_end_where_the_model_can_end_them():
    """``presto-sgl serve`` without ``--ending``: every request caps its answer, so the default is
    eos where the engine's model has a stop token, fixed where it has none."""
    config, _ = sampling_configs("step", max_new_tokens=16, block_size=8, steps=2)
    assert ending_default(config, ReferenceEngine(stop_ids=(0,))).target.ending == "eos"
    assert ending_default(config, ReferenceEngine()) == config  # no stop token: the fixed target


def test_compare_answer_tests_the_answer_statistics(tmp_path, capsys):
    """`compare --answer` runs the TOST on answer_log_likelihood and answer_confidence (the
    statistics a --ending eos run and a --ending fixed one share), not on the whole responses'."""
    runs = []
    for name, shift in (("fixed", 0.0), ("eos", 0.001)):
        d = tmp_path / name
        d.mkdir()
        rows = [
            {
                "id": str(i),
                "log_likelihood": -3.0 + i,
                "confidence": None,
                "answer_log_likelihood": -1.0 + 0.1 * i + shift * (i % 2),
                "answer_confidence": -2.0 + 0.1 * i,
            }
            for i in range(6)
        ]
        (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(str(d))
    assert main(["compare", *runs, "--answer", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["statistic"] for t in out["tests"]] == ["answer_log_likelihood", "answer_confidence"]
    assert out["equivalent"]
    assert main(["compare", *runs]) == 2  # the whole responses' confidence is missing
