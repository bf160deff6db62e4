"""The serve request parser: OpenAI fields and power-sampling fields to a validated job,
or a ParamError naming the request field (the HTTP side is tests/integration/test_serve.py)."""

from __future__ import annotations

import pytest

from presto_sgl.cli.main import main
from presto_sgl.config import sampling_configs
from presto_sgl.serve.parse import parse
from presto_sgl.serve.request import Defaults, ParamError

DEFAULTS = Defaults(*sampling_configs("step", max_new_tokens=32, block_size=16, steps=5, budget=10), seed=7, max_n=4)


def test_defaults_fill_what_the_request_leaves_out_or_sends_as_null():
    job = parse(
        {
            "prompt": [1, 2],
            "n": None,
            "seed": None,
            "max_tokens": None,
            "temperature": 0.0,
            "top_p": 1,
            "user": "eval-harness",
        },
        "completions",
        DEFAULTS,
    )
    assert job.n == 1 and job.seed == 7 and job.config.target.max_new_tokens == 32 and job.config.kernel.steps == 5
    assert job.presto.rule == "step" and job.presto.budget == 10 and job.stop == () and not job.stream


def test_request_fields_override_the_defaults():
    job = parse(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 48,
            "n": 3,
            "seed": 1,
            "alpha": 2.0,
            "block_size": 8,
            "steps": 2,
            "rule": "sequential",
            "method": "multitry",
            "try_temperatures": [0.5, 1.0],
            "stop": "\n",
        },
        "chat",
        DEFAULTS,
    )
    assert (
        job.config.target.max_new_tokens,
        job.config.target.block_size,
        job.config.kernel.steps,
        job.config.target.alpha,
    ) == (48, 8, 2, 2.0)
    assert job.presto.rule == "sequential" and job.config.kernel.name == "multitry"
    assert (
        job.config.kernel.params.try_temperatures == (0.5, 1.0) and job.stop == ("\n",) and job.n == 3 and job.seed == 1
    )
    assert job.prompts == ([{"role": "user", "content": "hi"}],)


def test_max_tokens_caps_the_answer_and_rounds_the_chain_up_to_whole_blocks():
    job = parse({"prompt": [1], "max_tokens": 20}, "completions", DEFAULTS)
    assert (job.max_tokens, job.config.target.max_new_tokens, job.config.target.block_size) == (20, 32, 16)
    job = parse({"prompt": [1], "max_tokens": 5}, "completions", DEFAULTS)  # shorter than a block: one block of 5
    assert (job.max_tokens, job.config.target.max_new_tokens, job.config.target.block_size) == (5, 5, 5)
    job = parse({"prompt": [1], "max_tokens": 9, "block_size": 4}, "completions", DEFAULTS)
    assert (job.max_tokens, job.config.target.max_new_tokens, job.config.target.block_size) == (9, 12, 4)
    job = parse({"prompt": [1], "max_tokens": 9, "block_size": 439972}, "completions", DEFAULTS)  # one block of 9,
    assert (job.max_tokens, job.config.target.max_new_tokens, job.config.target.block_size) == (
        9,
        9,
        9,
    )  # not 439972 tokens
    job = parse({"prompt": [1]}, "completions", DEFAULTS)  # the server's default length
    assert (job.max_tokens, job.config.target.max_new_tokens) == (32, 32)
    job = parse({"prompt": [1], "stop": ["a", "b", "c", "d", "e", "f"]}, "completions", DEFAULTS)
    assert job.stop == ("a", "b", "c", "d", "e", "f")  # any number of stop strings, as vLLM takes


def test_power_gen_rounds_the_chain_up_to_whole_blocks_of_at_most_max_tokens():
    """``power_gen``'s spec (the SGLang primitive) reads lengths as the serve parser does."""
    from presto_sgl.program.spec import gen_spec

    for block, T, B in ((4, 12, 4), (439972, 9, 9), (None, 9, 9)):
        config = gen_spec("a", max_tokens=9, **({} if block is None else {"block_size": block})).method.config
        assert (config.target.max_new_tokens, config.target.block_size) == (T, B)


def test_temperature_is_the_targets_sequence_level_temperature_one_over_alpha():
    assert parse({"prompt": [1], "temperature": 0.25}, "completions", DEFAULTS).config.target.alpha == 4.0
    assert parse({"prompt": [1], "temperature": 0.5, "alpha": 2.0}, "completions", DEFAULTS).config.target.alpha == 2.0
    default = DEFAULTS.config.target.alpha
    assert (
        parse({"prompt": [1], "temperature": 0}, "completions", DEFAULTS).config.target.alpha == default
    )  # greedy: kept
    assert parse({"prompt": [1], "temperature": 0, "alpha": 3.0}, "completions", DEFAULTS).config.target.alpha == 3.0


def test_logprobs_echo_and_stream_options():
    job = parse({"prompt": [1], "logprobs": 0}, "completions", DEFAULTS)
    assert job.logprobs == 0 and not job.scoring
    job = parse({"prompt": [1, 2], "echo": True, "logprobs": 3, "max_tokens": 1}, "completions", DEFAULTS)
    assert job.scoring and job.logprobs == 3 and job.max_tokens == 1
    assert parse({"prompt": [1], "echo": True, "logprobs": 1}, "completions", DEFAULTS).max_tokens == 0
    job = parse({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "chat", DEFAULTS)
    assert job.logprobs == 0
    assert parse({"prompt": [1], "stream": True}, "completions", DEFAULTS).include_usage is False
    job = parse({"prompt": [1], "stream": True, "stream_options": {"include_usage": True}}, "completions", DEFAULTS)
    assert job.include_usage is True


def test_the_method_field_names_the_kernel_and_its_0x_name_is_refused():
    job = parse({"prompt": [1], "method": "entropycut", "beta": 2.0}, "completions", DEFAULTS)
    assert job.config.kernel.name == "entropycut" and job.config.kernel.params.beta == 2.0
    with pytest.raises(ParamError) as err:
        parse({"prompt": [1], "sampler": "entropycut"}, "completions", DEFAULTS)
    assert err.value.param == "sampler" and "unrecognized request field `sampler`" in str(err.value)


@pytest.mark.parametrize(
    "body, kind, param",
    [
        ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, "chat", "max_completion_tokens"),
        ({"prompt": [1], "logprobs": 21}, "completions", "logprobs"),
        ({"prompt": [1], "logprobs": True}, "completions", "logprobs"),
        ({"prompt": [1], "logprobs": 1}, "completions", "logprobs"),  # top alternatives of a sampled answer
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 2}, "chat", "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 0}, "chat", "top_logprobs"),
        ({"prompt": [1], "echo": True, "logprobs": 1, "n": 2}, "completions", "n"),
        ({"prompt": [1], "echo": True, "logprobs": 1, "max_tokens": 2}, "completions", "max_tokens"),
        ({"prompt": [1], "stream_options": {"include_usage": True}}, "completions", "stream_options"),
        ({"prompt": [1], "stream": True, "stream_options": {"include_usage": 1}}, "completions", "stream_options"),
        ({"prompt": [1], "temperature": "hot"}, "completions", "temperature"),
        ({"prompt": [1], "temperature": 0.25, "alpha": 2.0}, "completions", "temperature"),
        ({"prompt": [1], "top_p": 0.5}, "completions", "top_p"),
        ({"prompt": [1], "stop": [1]}, "completions", "stop"),
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
    ],
)
def test_bad_fields_name_themselves(body, kind, param):
    with pytest.raises(ParamError) as err:
        parse(body, kind, DEFAULTS)
    assert err.value.param == param and f"`{param}`" in str(err.value)


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(ParamError, match="JSON object"):
        parse([1, 2], "completions", DEFAULTS)


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--queue-size", "-1"], "--queue-size"),
        (["--max-n", "0"], "--max-n"),
        (["--max-new-tokens", "20"], "--max-new-tokens"),
        (["--method", "bestofn"], "--method"),
        (["--beta", "2"], "--beta"),  # a parameter of entropycut, not of the default powermh
        (["--request-timeout", "0"], "--request-timeout"),
        (["--shutdown-grace", "-1"], "--shutdown-grace"),
    ],
)
def test_bad_serve_flags_exit_2_naming_the_flag(flags, flag, capsys):
    assert main(["serve", "--engine", "reference", *flags]) == 2
    assert f"`{flag}`" in capsys.readouterr().err
