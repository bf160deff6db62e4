"""Structured power sampling from the command line: ``sample`` and ``run`` take ``--regex``,
``--json-schema`` (inline or a file), ``--ebnf``, ``--dtype`` and ``--min-tokens``; ``run``
also samples each record of a JSONL dataset under the constraint it carries; the answers are
checked by an independent validator (Python's ``re`` here) and the summary counts those that
validate. On the embedded engine with the trained tiny-adder model (its worked-step format)."""

from __future__ import annotations

import argparse
import json

import pytest

from presto_sgl.cli.main import main
from presto_sgl.cli.options import args_constraint
from presto_sgl.constraints import REGEX_INT, Constraint

ODD = r"([0-9]\+[0-9]\+[0-9]=[0-9][0-9];)+A:[0-9]*[13579]"
"""The tiny adder's worked steps, ending in an odd digit (tests/engines/test_structured_engines.py)."""
EVEN = ODD[:-7] + "[02468]"
TINY = ["--engine", "embedded", "--model", "tiny-adder", "--no-chat", "--block-size", "16", "--steps", "2"]


def test_sample_samples_under_the_flags_constraint_and_says_it_validates(capsys):
    args = ["sample", *TINY, "--prompt", "Q:58+67=", "--max-new-tokens", "48", "--regex", ODD, "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["ending"] == "eos" and out["config"]["constraint"] == {"regex": ODD}
    assert out["valid"] is True and out["eos_index"] is not None
    assert out["response_text"][-1] in "13579"
    assert main(args[:-1]) == 0  # the text form says so in its summary
    assert "the answer validates" in capsys.readouterr().out


def test_run_counts_the_answers_that_validate_and_takes_each_records_constraint(tmp_path, capsys):
    data = tmp_path / "sums.jsonl"
    rows = [
        {"id": "a", "prompt": "Q:58+67="},
        {"id": "b", "prompt": "Q:12+35=", "regex": EVEN},  # its own constraint, over the run's
        {"id": "c", "prompt": "Q:40+9="},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    args = ["run", *TINY, "--dataset", str(data), "--max-new-tokens", "48", "--regex", ODD, "--out", str(out)]
    assert main([*args, "--no-progress"]) == 0
    summary = capsys.readouterr().out
    records = {r["id"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    assert records["b"]["constraint"] == {"regex": EVEN} and records["a"]["constraint"] == {"regex": ODD}
    assert records["b"]["response_text"][-1] in "02468" and records["a"]["response_text"][-1] in "13579"
    valid = sum(r["valid"] is True for r in records.values())
    assert valid == 3 and "3/3 answers validate" in summary


def test_a_grammar_flag_names_a_file_or_is_inline(tmp_path):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    for value in (str(path), json.dumps(schema)):
        ns = argparse.Namespace(json_schema=value, regex=None, ebnf=None, dtype=None, min_tokens=None)
        assert args_constraint(ns) == Constraint(json_schema=schema)
    ns = argparse.Namespace(json_schema=None, regex=None, ebnf=None, dtype="int", min_tokens=2)
    assert args_constraint(ns) == Constraint(regex=REGEX_INT, min_tokens=2)


@pytest.mark.parametrize(
    "extra,named",
    [
        (["--regex", ODD, "--ending", "fixed"], "ending"),
        (["--regex", ODD, "--method", "bestofn"], "--regex"),
        (["--regex", "(unclosed"], "--regex"),
        (["--json-schema", "{not json"], "--json-schema"),
        (["--regex", ODD, "--dtype", "int"], "--regex"),
        (["--min-tokens", "-1"], "--min-tokens"),
    ],
)
def test_a_bad_constraint_exits_2_naming_its_flag(extra, named, capsys):
    assert main(["sample", *TINY, "--prompt", "Q:1+2=", "--max-new-tokens", "16", *extra]) == 2
    assert named in capsys.readouterr().err


def test_validation_is_independent_of_the_mask():
    """What ``valid`` means: a complete answer (ended at a stop token) of at least ``min_tokens``
    tokens, in the grammar's language by Python's own checks; a prefix cut at the length is not."""
    c = Constraint(regex="[0-9]+", min_tokens=2)
    assert c.validates("123", 3, True) is True
    assert c.validates("12a", 3, True) is False
    assert c.validates("1", 1, True) is False  # fewer than min_tokens
    assert c.validates("123", 3, False) is False  # a prefix cut at the length
    schema = Constraint(json_schema={"type": "object", "required": ["a"]})
    assert schema.validates('{"a": 1}', 5, True) is True and schema.validates('{"b": 1}', 5, True) is False
    assert schema.validates("{", 1, True) is False
    assert Constraint(ebnf='root ::= "a"').validates("a", 1, True) is None  # no independent EBNF check here
