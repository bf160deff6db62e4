"""The serve request parser: OpenAI fields and power-sampling fields to a validated job,
or a ParamError naming the request field (the HTTP side is tests/integration/test_serve.py)."""

from __future__ import annotations

import pytest

from presto_sgl.cli.main import main
from presto_sgl.config import sampling_configs
from presto_sgl.serve.params import Defaults, ParamError, parse

DEFAULTS = Defaults(*sampling_configs("step", max_new_tokens=32, block_size=16, steps=5, budget=10), seed=7, max_n=4)


def test_defaults_fill_what_the_request_leaves_out_or_sends_as_null():
    job = parse({"prompt": [1, 2], "n": None, "seed": None, "max_tokens": None, "temperature": 0.0, "top_p": 1,
                 "user": "eval-harness"}, "completions", DEFAULTS)
    assert job.n == 1 and job.seed == 7 and job.config.max_new_tokens == 32 and job.config.steps == 5
    assert job.presto.rule == "step" and job.presto.budget == 10 and job.stop == () and not job.stream


def test_request_fields_override_the_defaults():
    job = parse({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 48, "n": 3, "seed": 1,
                 "alpha": 2.0, "block_size": 8, "steps": 2, "rule": "sequential", "method": "multitry",
                 "try_temperatures": [0.5, 1.0], "stop": "\n"}, "chat", DEFAULTS)
    assert (job.config.max_new_tokens, job.config.block_size, job.config.steps, job.config.alpha) == (48, 8, 2, 2.0)
    assert job.presto.rule == "sequential" and job.config.kernel == "multitry"
    assert job.config.params.try_temperatures == (0.5, 1.0) and job.stop == ("\n",) and job.n == 3 and job.seed == 1
    assert job.prompts == ([{"role": "user", "content": "hi"}],)


def test_the_old_sampler_field_still_names_the_kernel():
    job = parse({"prompt": [1], "sampler": "entropycut", "beta": 2.0}, "completions", DEFAULTS)
    assert job.config.kernel == "entropycut" and job.config.params.beta == 2.0
    with pytest.raises(ParamError) as err:
        parse({"prompt": [1], "sampler": "beam"}, "completions", DEFAULTS)
    assert err.value.param == "sampler" and "`sampler` (='beam')" in str(err.value)


@pytest.mark.parametrize("body, kind, param", [
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 20}, "chat", "max_completion_tokens"),
    ({"messages": []}, "chat", "messages"),
    ({"prompt": [1], "n": 5}, "completions", "n"),
    ({"prompt": [1], "stream": "yes"}, "completions", "stream"),
    ({"prompt": [1], "return_token_ids": 1}, "completions", "return_token_ids"),
    ({"prompt": [1], "messages": []}, "completions", "messages"),
    ({"prompt": [1], "presence_penalty": 0.5}, "completions", "presence_penalty"),
    ({"prompt": [1], "best_of": 3}, "completions", "best_of"),
    ({"prompt": [[1], "a", 3]}, "completions", "prompt"),
    ({"prompt": [1, True]}, "completions", "prompt"),
    ({}, "completions", "prompt"),
    ({"prompt": [1], "tau": 0}, "completions", "tau"),
    ({"prompt": [1], "try_temperatures": [0.5, 0.5], "method": "multitry"}, "completions", "try_temperatures"),
    ({"prompt": [1], "method": "beam"}, "completions", "method"),
    ({"prompt": [1], "method": ["powermh"]}, "completions", "method"),
    ({"prompt": [1], "rule": {"bfs": 1}}, "completions", "rule"),
    ({"prompt": [1], "try_temperatures": [0.5, "x"], "method": "multitry"}, "completions", "try_temperatures"),
    ({"prompt": [1], "beta": 2.0}, "completions", "beta"),  # a parameter of another kernel (entropycut)
    ({"prompt": [1], "keying": "path"}, "completions", "keying"),  # the step rule couples with step keys
])
def test_bad_fields_name_themselves(body, kind, param):
    with pytest.raises(ParamError) as err:
        parse(body, kind, DEFAULTS)
    assert err.value.param == param and f"`{param}`" in str(err.value)


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(ParamError, match="JSON object"):
        parse([1, 2], "completions", DEFAULTS)


@pytest.mark.parametrize("flags, flag", [
    (["--concurrency", "0"], "--concurrency"),
    (["--queue-size", "-1"], "--queue-size"),
    (["--max-n", "0"], "--max-n"),
    (["--max-new-tokens", "20"], "--max-new-tokens"),
    (["--method", "bestofn"], "--method"),
    (["--beta", "2"], "--beta"),  # a parameter of entropycut, not of the default powermh
    (["--request-timeout", "0"], "--request-timeout"),
    (["--shutdown-grace", "-1"], "--shutdown-grace"),
])
def test_bad_serve_flags_exit_2_naming_the_flag(flags, flag, capsys):
    assert main(["serve", "--engine", "reference", *flags]) == 2
    assert f"`{flag}`" in capsys.readouterr().err
