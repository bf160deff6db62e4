"""The registry is the one front-end seam: a kernel registered there (and nowhere else) is a
``--method`` choice with its flags in ``sample --help``, ``serve`` request fields and
``power_gen`` keyword arguments, runs through each, and is recorded in its traces."""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from presto_sgl import ConfigError, registry
from presto_sgl.chain.trace import read_trace
from presto_sgl.cli.main import main
from presto_sgl.config import KernelConfig, PrestoConfig, Target, parameters, sampling_configs
from presto_sgl.fields import Validated, integer, option
from presto_sgl.kernels.powermh import PowerMHKernel
from presto_sgl.program.frontend import power_gen
from presto_sgl.program.spec import call_method
from presto_sgl.serve.fieldtable import fields
from presto_sgl.serve.parse import parse
from presto_sgl.serve.request import Defaults, ParamError


@dataclass(frozen=True)
class ToyParams(Validated):
    toy_knob: int = option(3, "toy: a knob no built-in kernel has", integer(1, "the toy's knob", 3))


@dataclass(frozen=True)
class ToyKernel(PowerMHKernel):
    """PowerMH under another name, with a knob: its chains are PowerMH's."""

    knob: int = 3
    name: ClassVar[str] = "toy"


@pytest.fixture
def toy():
    registry.register_kernel(
        registry.KernelSpec("toy", ToyParams, lambda alpha, tau, p: ToyKernel(alpha, tau, p.toy_knob), "a toy kernel")
    )
    yield
    registry.unregister("toy")


SAMPLE = [
    "sample",
    "--engine",
    "reference",
    "--prompt-ids",
    "1,2,3",
    "--max-new-tokens",
    "8",
    "--block-size",
    "8",
    "--steps",
    "3",
    "--seed",
    "4",
    "--json",
]


def test_a_registered_kernel_is_a_cli_method_with_its_flags(toy, capsys, tmp_path):
    assert main(["sample", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert (
        "--toy-knob" in help_text and "toy (a toy kernel)" in help_text and "a knob no built-in kernel has" in help_text
    )

    trace = tmp_path / "toy.jsonl"
    assert main([*SAMPLE, "--method", "toy", "--toy-knob", "2", "--trace", str(trace)]) == 0
    toy_run = json.loads(capsys.readouterr().out)
    assert toy_run["config"]["method"] == "toy" and toy_run["config"]["toy_knob"] == 2
    run = read_trace(trace.read_text().splitlines(keepends=True))[0]
    assert run["type"] == "run" and run["method"] == "toy" and run["toy_knob"] == 2

    assert main([*SAMPLE, "--method", "powermh"]) == 0  # the toy is PowerMH: the very same chain
    assert json.loads(capsys.readouterr().out)["response_ids"] == toy_run["response_ids"]

    assert main([*SAMPLE, "--method", "toy", "--toy-knob", "0"]) == 2
    assert "`--toy-knob` (=0) must be an integer >= 1 (the toy's knob), e.g. --toy-knob 3" in capsys.readouterr().err
    assert main([*SAMPLE, "--toy-knob", "2"]) == 2  # the default method is powermh
    assert "`--toy-knob` is a parameter of toy, not of 'powermh'" in capsys.readouterr().err


def test_a_registered_kernel_is_a_serve_field(toy):
    defaults = Defaults(*sampling_configs("step", max_new_tokens=16, block_size=16, steps=2))
    assert "toy_knob" in fields("completions") and "toy_knob" in fields("chat")
    job = parse({"prompt": [1, 2], "method": "toy", "toy_knob": 5}, "completions", defaults)
    assert (job.config.kernel.name, job.config.kernel.params) == ("toy", ToyParams(5))
    with pytest.raises(ParamError) as err:
        parse({"prompt": [1, 2], "method": "toy", "toy_knob": 0}, "completions", defaults)
    assert err.value.param == "toy_knob" and "`toy_knob` (=0)" in str(err.value)


def test_a_registered_kernel_is_a_power_gen_argument(toy):
    params = inspect.signature(power_gen).parameters
    assert params["toy_knob"].default == 3 and params["method"].default == "powermh"
    assert call_method({"method": "toy", "toy_knob": 4}).config.kernel.params == ToyParams(4)
    with pytest.raises(ConfigError) as err:
        call_method({"method": "toy", "toy_knob": True})
    assert (err.value.param, err.value.value) == ("toy_knob", True)


def test_unregistered_the_kernel_is_gone_everywhere(toy):
    registry.unregister("toy")
    assert "toy_knob" not in {p.name for p in parameters()} and "toy_knob" not in fields("completions")
    assert "toy_knob" not in inspect.signature(power_gen).parameters
    with pytest.raises(ConfigError, match="`method` \\(='toy'\\) must be one of"):
        sampling_configs("step", method="toy")


def test_registering_refuses_taken_names_and_parameters(toy):
    spec = registry.KernelSpec("toy", ToyParams, lambda alpha, tau, p: ToyKernel(alpha, tau), "again")
    with pytest.raises(ValueError, match="name is taken"):
        registry.register_kernel(spec)
    with pytest.raises(ValueError, match=r"parameters \['toy_knob'\] are already declared"):
        registry.register_kernel(registry.KernelSpec("toy2", ToyParams, spec.make, "same knob"))

    @dataclass(frozen=True)
    class Clash(Validated):
        alpha: float = option(1.0, "a schedule name")

    with pytest.raises(ValueError, match=r"parameters \['alpha'\]"):
        registry.register_kernel(registry.KernelSpec("toy3", Clash, spec.make, "shadows alpha"))


def test_the_reserved_names_are_the_configs_fields_and_the_front_ends():
    """The registry lists the names no kernel or baseline may declare (no module adds to it at
    import): every field of the configs, and the front ends' own."""
    configs = {f.name for cls in (Target, KernelConfig, PrestoConfig) for f in dataclasses.fields(cls)} - {"constraint"}
    assert configs | {"method", "kernel", "seed", "prompt"} == registry.RESERVED


def test_config_errors_carry_the_parameter_and_render_per_front_end():
    with pytest.raises(ConfigError) as err:
        sampling_configs("step", max_new_tokens=30)
    e = err.value
    assert (e.param, e.value) == ("max_new_tokens", 30)
    assert (
        str(e) == "`max_new_tokens` (=30) must be a positive multiple of `block_size` (=16); use e.g. max_new_tokens=32"
    )
    flags = e.render(lambda p: "--" + p.replace("_", "-"), lambda n, v: f"{n} {v}")
    assert flags == (
        "`--max-new-tokens` (=30) must be a positive multiple of `--block-size` (=16); use e.g. --max-new-tokens 32"
    )
    stream = io.StringIO()
    print(e.render(lambda p: {"max_new_tokens": "max_tokens"}.get(p, p)), file=stream)
    assert stream.getvalue().startswith("`max_tokens` (=30)")
