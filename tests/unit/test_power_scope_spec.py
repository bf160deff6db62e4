"""A scope's call is power_gen's call of the same arguments (without sglang: the expressions'
arguments as SGLang's IR stores them, read by :func:`~presto_sgl.program.scope.call_of`).
The programs themselves run under the switch in tests/integration/test_power_scope.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from presto_sgl import ConfigError
from presto_sgl.program.scope import Scope, call_of, spec_in_scope
from presto_sgl.program.spec import spec_of

SGL_FIELDS = [
    "max_new_tokens",
    "min_new_tokens",
    "n",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_text_in_logprobs",
    "json_schema",
    "dtype",
    "regex",
]
"""``sglang.lang.ir.SglSamplingParams``'s fields: ``sgl.gen`` leaves the ones it was not given None."""


def gen(name, **given):
    """An ``SglGen`` as the IR stores ``sgl.gen(name, **given)`` (``max_tokens`` as max_new_tokens)."""
    given = {("max_new_tokens" if k == "max_tokens" else "min_new_tokens" if k == "min_tokens" else k): v
             for k, v in given.items()}  # fmt: skip
    return SimpleNamespace(name=name, sampling_params=SimpleNamespace(**{f: given.get(f) for f in SGL_FIELDS}))


def select(name, choices, temperature=0.0):
    return SimpleNamespace(name=name, choices=choices, temperature=temperature, choices_method=object())


SCOPE = {"alpha": 4.0, "steps": 2, "block_size": 8, "rule": "bfs", "budget": 6, "seed": 5}


@pytest.mark.parametrize(
    "expr,call",
    [
        (gen("a", max_tokens=16), {"max_tokens": 16}),
        (
            gen("a", max_tokens=16, stop=["\n"], stop_token_ids=[2]),
            {"max_tokens": 16, "stop": ["\n"], "stop_token_ids": [2]},
        ),
        (gen("a", max_tokens=12, regex="[0-9]+"), {"max_tokens": 12, "regex": "[0-9]+"}),
        (
            gen("a", max_tokens=12, json_schema='{"type": "object"}'),
            {"max_tokens": 12, "json_schema": '{"type": "object"}'},
        ),
        (gen("a", max_tokens=8, dtype=int), {"max_tokens": 8, "dtype": int}),
        (gen("a", max_tokens=8, min_tokens=3), {"max_tokens": 8, "min_new_tokens": 3}),
        (gen("a", max_tokens=8, temperature=0), {"max_tokens": 8, "temperature": 0}),
        (gen("a", max_tokens=8, temperature=0.5), {"max_tokens": 8, "temperature": 0.5}),
        (gen("a", max_tokens=8, top_p=1.0, n=1, ignore_eos=False), {"max_tokens": 8}),  # neutral: ask for nothing
        (gen(None, max_tokens=8, return_logprob=True), {"max_tokens": 8, "return_logprob": True}),
        (select("pick", ["yes", "no"]), {"choices": ["yes", "no"], "temperature": 0.0}),
    ],
)
def test_a_call_in_a_scope_is_power_gens_call_of_its_arguments(expr, call):
    assert call_of(expr) == call
    scope = Scope(dict(SCOPE))
    options = dict(SCOPE)
    if call.get("temperature", 0) > 0:
        options.pop("alpha")  # the call's temperature gives alpha, over the scope's
    if "choices" in call:
        options = {k: options[k] for k in ("alpha", "seed")}
    assert spec_in_scope(expr.name, call, scope) == spec_of(expr.name, **call, **options)


def test_unexact_arguments_are_read_for_refusal():
    call = call_of(gen("a", max_tokens=8, top_p=0.9, presence_penalty=0.5, n=2))
    assert {"top_p": 0.9, "presence_penalty": 0.5, "n": 2}.items() <= call.items()


@pytest.mark.parametrize(
    "options,param",
    [
        ({"max_tokens": 8}, "max_tokens"),
        ({"regex": "a"}, "regex"),
        ({"chain_id": 3}, "chain_id"),
        ({"predictor": "x.json"}, "predictor"),
        ({"steps": -1}, "steps"),
        ({"alpha": 0}, "alpha"),
        ({"method": "nope"}, "method"),
        ({"seed": -1}, "seed"),
    ],
)
def test_a_scope_checks_its_options_once_by_name(options, param):
    with pytest.raises(ConfigError) as err:
        Scope(options)
    assert err.value.param == param
