"""SGLang's ``structural_tag`` as a constraint kind: declared once (its name is the request field,
the ``power_gen`` argument and SGLang's sampling parameter), both of SGLang's forms compiled as
SGLang's xgrammar backend compiles them, ``response_format`` ``{"type": "structural_tag", ...}``
read by ``serve``, and exact chains on the embedded engine whose answers pass an independent
check of the tagged segments (Python's ``json`` and ``jsonschema``)."""

from __future__ import annotations

import json

import pytest

from presto_sgl import ConfigError, Sampler, sampling_configs
from presto_sgl.build import constrained
from presto_sgl.config import MethodConfig
from presto_sgl.constraints import Constraint
from presto_sgl.engines import grammar
from presto_sgl.engines.base import Request
from presto_sgl.program.spec import gen_spec
from presto_sgl.serve.parse import parse
from presto_sgl.serve.request import Defaults

STEP = {"begin": "=", "schema": {"type": "integer", "minimum": 0, "maximum": 19}, "end": ";"}
TAG = {"structures": [STEP], "triggers": ["="]}
"""The tiny adder's worked steps ("7+5+0=12;"): each sum after "=" JSON, so "=04;" (a leading zero) is out."""
FORMAT = {
    "format": {
        "type": "triggered_tags",
        "triggers": ["<f>"],
        "tags": [{"type": "tag", "begin": "<f>", "content": {"type": "json_schema", "json_schema": {}}, "end": "</f>"}],
    }
}


def test_both_forms_are_one_constraint_kind_compiled_as_sglang_compiles_them():
    for tag in (TAG, FORMAT):
        for given in (tag, json.dumps(tag)):
            c = Constraint(structural_tag=given)
            assert c.grammar == ("structural_tag", json.dumps(tag, separators=(",", ":")))
            grammar.check(c)
    for bad in ({"structures": []}, {"triggers": ["x"]}, "not json", [1]):
        with pytest.raises(ConfigError) as err:
            Constraint(structural_tag=bad)
        assert err.value.param == "structural_tag"
    with pytest.raises(ConfigError, match="`structural_tag` cannot be compiled"):
        grammar.check(Constraint(structural_tag={"structures": [{**STEP, "schema": {"type": 5}}], "triggers": ["="]}))


def test_the_independent_check_reads_the_tagged_segments():
    c = Constraint(structural_tag=TAG)
    assert c.validates("7+5+0=12;4+8+1=13;0+3+1=4;A:432", 20, True) is True
    assert c.validates("7+5+0=12;0+3+1=04;A:4", 20, True) is False  # "04" is not JSON
    assert c.validates("7+5+0=12;4+8+9=21;A:4", 20, True) is False  # 21 > the schema's maximum
    assert c.validates("7+5+0=12", 20, True) is False  # no end
    assert c.validates("no trigger at all", 20, True) is True
    assert Constraint(structural_tag=FORMAT).validates("x", 1, True) is None  # no parser here for `format`


def test_front_ends_take_it_by_its_name():
    cfg, presto = sampling_configs("step", max_new_tokens=16, block_size=8)
    defaults = Defaults(cfg, presto)
    fmt = {"type": "structural_tag", **TAG}
    for body, field in (({"response_format": fmt}, "response_format"), ({"structural_tag": TAG}, "structural_tag")):
        job = parse({"prompt": [1], **body}, "completions", defaults)
        assert job.config.target.constraint == Constraint(structural_tag=TAG) and job.constraint_field == field
        assert job.config.target.ending == "eos"
    spec = gen_spec("x", structural_tag=TAG, max_tokens=16, block_size=8, steps=2)
    assert spec.method.config.target.constraint == Constraint(structural_tag=TAG)


def test_masked_draws_and_chains_obey_the_tag(tiny_engine):
    prompt, stop = tuple(tiny_engine.text.encode("Q:47+385=")), tiny_engine.text.stop_ids
    c = Constraint(structural_tag=TAG)
    requests = [Request(prompt, 48, 1.0, seed, stop=stop, constraint=c) for seed in range(6)]
    for comp in tiny_engine.generate(requests):
        assert comp.tokens[-1] in stop, "the tiny adder ends its answer"
        text = tiny_engine.text.decode(comp.tokens[:-1])
        assert c.validates(text, len(comp.tokens) - 1, True), text  # the grammar starts at the response
    cfg, presto = sampling_configs("step", ending="eos", alpha=4.0, tau=2.0, max_new_tokens=48, block_size=16, steps=3)
    m = constrained(MethodConfig("powermh", cfg, presto), c)
    state = Sampler(tiny_engine, m.config, m.presto).run(prompt, seed=3).state
    assert state.tokens[-1] in stop
    assert c.validates(tiny_engine.text.decode(state.tokens[:-1]), state.length - 1, True)
