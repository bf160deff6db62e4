"""One typed object per concept (presto_sgl.config): what each holds, what each refuses, and
that the flat options of every front end map onto them once."""

from __future__ import annotations

import dataclasses

import pytest

from presto_sgl import (
    BaselineConfig,
    ConfigError,
    KernelConfig,
    MethodConfig,
    PowerConfig,
    PrestoConfig,
    Target,
    make_method,
    method_config,
    sampling_configs,
)
from presto_sgl.baselines import PowerSMCParams
from presto_sgl.engines.reference import ReferenceEngine
from presto_sgl.kernels.entropycut import EntropyCutParams
from presto_sgl.kernels.multitry import MultiTryParams


def test_flat_options_map_onto_the_target_the_kernel_and_the_run():
    config, presto = sampling_configs(
        "bfs", alpha=2.0, max_new_tokens=24, block_size=8, ending="eos", method="entropycut", beta=3.0, steps=4
    )
    assert config == PowerConfig(
        Target(alpha=2.0, max_new_tokens=24, block_size=8, ending="eos"),
        KernelConfig("entropycut", steps=4, params=EntropyCutParams(beta=3.0)),
    )
    assert presto == PrestoConfig("bfs") and presto.keying == "path"
    assert (config.target.num_stages, config.target.ends, config.temperature) == (3, True, 0.5)


def test_keying_is_the_rules_and_only_sequential_chooses():
    assert [PrestoConfig(rule).keying for rule in ("sequential", "bfs", "predictive", "step")] == [
        "step",
        "path",
        "path",
        "step",
    ]
    assert PrestoConfig("sequential", keying="path").keying == "path"
    for rule, wrong in (("bfs", "step"), ("predictive", "step"), ("step", "path")):
        with pytest.raises(ConfigError, match=f"keying='{'path' if wrong == 'step' else 'step'}'") as err:
            PrestoConfig(rule, keying=wrong)
        assert err.value.param == "keying"


def test_fields_on_a_base_are_typed_replaces_and_a_new_rule_brings_its_keys():
    config, presto = sampling_configs("sequential", keying="path", method="multitry", tries=3, steps=5)
    base = MethodConfig("multitry", config, presto)
    new = method_config({"rule": "step", "alpha": 2.0, "tries": 2}, base)
    assert new.presto == PrestoConfig("step") and new.presto.keying == "step"  # not the old path keys
    assert isinstance(new.config, PowerConfig) and new.config.target == dataclasses.replace(config.target, alpha=2.0)
    assert new.config.kernel == KernelConfig("multitry", steps=5, params=MultiTryParams(tries=2))
    kept = method_config({"budget": 4}, base)
    assert kept.config == config and kept.presto is not None and (kept.presto.keying, kept.presto.budget) == ("path", 4)
    other = method_config({"method": "entropycut"}, base).config
    assert isinstance(other, PowerConfig) and other.kernel == KernelConfig("entropycut", steps=5)  # its own defaults
    with pytest.raises(ConfigError, match="`block_size`"):
        method_config({"block_size": 0}, base)
    with pytest.raises(ConfigError, match=r"`tries` is a parameter of multitry, not of 'entropycut'"):
        method_config({"method": "entropycut", "tries": 2}, base)


def test_each_object_describes_itself():
    """A run's description is its objects' own: the kernel as ``method``, the target, K, tau
    resolved, the kernel's parameters; the rule's fields, only those a sequential run uses."""
    config, presto = sampling_configs("predictive", method="entropycut", beta=2.5, budget=7, max_new_tokens=32)
    assert config.describe() == {
        "method": "entropycut",
        "alpha": 4.0,
        "max_new_tokens": 32,
        "block_size": 16,
        "ending": "fixed",
        "steps": 10,
        "tau": 0.25,
        "beta": 2.5,
    }
    assert presto.describe() == {
        "rule": "predictive",
        "budget": 7,
        "predictor": "default",
        "online": False,
        "cost_aware": False,
        "keying": "path",
    }
    assert PrestoConfig("sequential", keying="path").describe() == {"rule": "sequential", "keying": "path"}
    multitry = KernelConfig("multitry", tau=0.5).describe()
    assert multitry == {"method": "multitry", "steps": 10, "tau": 0.5, "tries": 4, "try_temperatures": [0.25, 0.5, 1.0]}


def test_each_object_checks_its_own_fields_and_kernel_params_their_kernel():
    with pytest.raises(ConfigError, match=r"`max_new_tokens`.*max_new_tokens=48"):
        Target(max_new_tokens=40, block_size=16)
    assert Target(max_new_tokens=40, block_size=None).num_stages == 1  # one stage: the whole response
    with pytest.raises(ConfigError, match="`params` must be a MultiTryParams"):
        KernelConfig("multitry", params=EntropyCutParams())
    with pytest.raises(ConfigError, match="`name`"):
        KernelConfig("nosuch")
    with pytest.raises(TypeError, match="a Target and a KernelConfig"):
        PowerConfig(KernelConfig(), Target())


def test_power_config_takes_objects_only():
    """The flat 0.x form (``PowerConfig(alpha=..., ...)``) is gone: a chain is a Target and a KernelConfig."""
    with pytest.raises(TypeError, match="alpha"):
        PowerConfig(alpha=2.0)
    assert PowerConfig() == PowerConfig(Target(), KernelConfig())


def test_a_baseline_gets_its_own_config_without_a_placeholder_block():
    """best-of-N draws whole responses: its target has no block size (before: block_size = T),
    so a length that no default block divides is fine; Power-SMC grows blocks and keeps one."""
    bon = method_config({"method": "bestofn", "max_new_tokens": 50, "best_of": 3})
    assert isinstance(bon.config, BaselineConfig) and bon.presto is None
    assert bon.config.target == Target(max_new_tokens=50, block_size=None)
    smc = method_config({"method": "powersmc", "max_new_tokens": 32, "block_size": 8, "particles": 2})
    assert isinstance(smc.config, BaselineConfig) and smc.config.target.block_size == 8
    ignored = method_config({"method": "lowtemp", "max_new_tokens": 8, "block_size": 4, "steps": 3, "keying": "path"})
    assert (
        ignored.config == method_config({"method": "lowtemp", "max_new_tokens": 8}).config
    )  # one set of flags for every method
    for name, value in (("rule", "bfs"), ("budget", 4), ("beta", 2.0)):
        with pytest.raises(ConfigError, match=f"`{name}`"):
            method_config({"method": "bestofn", name: value})
    with pytest.raises(ConfigError, match="`ramp_tokens`"):  # checked across the target and its params
        BaselineConfig("powersmc", Target(max_new_tokens=16), params=PowerSMCParams(ramp_tokens=17))
    assert make_method(ReferenceEngine(), bon).describe()["max_new_tokens"] == 50
